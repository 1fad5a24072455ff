"""Which pretrained values of a submitted spec are Hugging Face hub ids, and whether each resolves.

`service.paths` keeps a pretrained value that names no file under a root only when it has the shape of a
hub id; this module decides at submit, so a bad value is a 422 instead of a failure in every trial:
- a file-format source (glove, word2vec, fasttext, npy, pretrained) is read from a file, never from the
  hub: a bare name such as `synthetic_vectors.txt` is a missing file;
- a Hugging Face source (hf, bert, mbert, t5, mt5), or a tokenizer that is no embinit name (spacy, ...),
  resolves from the API's local Hugging Face cache (at the revision a pinned id, `<id>@<revision>`, names), else,
  unless `HF_HUB_OFFLINE` is set, from the hub (asked once, briefly); the answer's `notices` say that
  the trials will fetch it. Offline, not cached, unknown on the hub, or the hub unreachable: a 422.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from embinit.errors import unknown_name
from embinit.hf_cache import cached_revisions, offline, revision_problem, snapshot, split_revision
from embinit.init.registry import SOURCE_FAMILIES, parse_init_spec
from embinit.spec import PlannedTrial
from service.paths import TOKENIZER_NAMES, roots_shown

HUB_TIMEOUT_S = 10.0


def cached(hub_id: str) -> bool:
    """True when the model's config is in the local Hugging Face cache (what an offline trial can load), at
    its pinned revision where the id pins one (`<id>@<revision>`)."""
    folder = snapshot(hub_id)
    # a model, or a tokenizer-only repository
    return folder is not None and any((folder / name).is_file() for name in ("config.json", "tokenizer_config.json"))


def on_hub(hub_id: str) -> str | None:
    """None when the hub knows the model (at its pinned revision, if any), else why it cannot be used."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError
    repo_id, revision = split_revision(hub_id)
    try:
        HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None).model_info(repo_id, revision=revision,
                                                                         timeout=HUB_TIMEOUT_S)
    except GatedRepoError:
        return None  # it exists; the trials need a token with access
    except RevisionNotFoundError:   # a subclass of the one below in some versions: first
        return f"the model has no revision {revision!r} on the Hugging Face hub"
    except RepositoryNotFoundError:
        return "no such model on the Hugging Face hub"
    except Exception as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        return f"the Hugging Face hub cannot be reached to resolve it ({first})"
    return None


def _candidates(plan: Iterable[PlannedTrial]) -> Iterable[tuple[str, str]]:
    """(source family, value) of every trial side whose pretrained value is not a path (a confined path
    is absolute), once each."""
    seen = set()
    for planned in plan:
        cfg = planned.config
        for init, value in ((cfg["init"], cfg.get("pretrained")),
                            (cfg.get("src_init"), cfg.get("src_pretrained"))):
            if init is None or value is None or os.path.isabs(value):
                continue
            source = parse_init_spec(init).source
            if source in SOURCE_FAMILIES and (source, value) not in seen:
                seen.add((source, value))
                yield source, value
        tokenizer = cfg.get("tokenizer")  # a Hugging Face tokenizer id, resolved like a subword source
        if tokenizer and not os.path.isabs(tokenizer) and tokenizer not in TOKENIZER_NAMES \
                and ("tokenizer", tokenizer) not in seen:
            seen.add(("tokenizer", tokenizer))
            yield "tokenizer", tokenizer


def check_hub_ids(plan: Iterable[PlannedTrial], roots: list[Path], locate) -> tuple[list[tuple[str, str]], list[str]]:
    """(problems as (loc, msg), notices) for the hub ids of a spec's planned trials; `locate(value,
    tokenizer)` gives the spec location a value was written at (as a tokenizer, or as a source)."""
    problems, notices = [], []
    shown = roots_shown(roots, "pretrained")
    for source, value in _candidates(plan):
        where = locate(value, source == "tokenizer")
        # a tokenizer value is also no registered name (a typo such as 'spacey' looks like a hub id)
        names = f"; nor a tokenizer name: {unknown_name('tokenizer', value, TOKENIZER_NAMES)}" \
            if source == "tokenizer" else ""
        if source != "tokenizer" and not SOURCE_FAMILIES[source].subword:  # a file format: never the hub
            problems.append((where, f"{value!r} is no file inside {shown}; a {source} source is read from a "
                                    f"file (put it in a pretrained root), it is not a hub id"))
        elif (pin := revision_problem(value)) is not None:
            problems.append((where, pin))
        elif cached(value):
            notices.append(f"{where}: {value!r} is read from the Hugging Face cache of the API's machine")
        elif offline() is not None:
            held = cached_revisions(value)   # a pin the cache lacks, where it holds other revisions
            holds = f"; the cache holds {split_revision(value)[0]} at {', '.join(held)}" if held else ""
            problems.append((where, f"{value!r} is no file inside {shown} and not in the local Hugging Face "
                                    f"cache, and HF_HUB_OFFLINE is set, so it cannot be fetched from the hub"
                                    + holds + names))
        elif (why := on_hub(value)) is not None:
            problems.append((where, f"{value!r} is no file inside {shown} and not a usable hub id: {why}"
                                    + names))
        else:
            notices.append(f"{where}: {value!r} will be fetched from the Hugging Face hub by the trials "
                           f"(it is not in the local cache)")
    return problems, notices
