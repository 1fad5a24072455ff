"""Hugging Face sources: a model's input-embedding matrix plus its tokenizer (`transformers`).

The paper (section 3.3) copies the rows of the sub-word tokens that both vocabularies share. Here each
vocabulary token takes the source row of the tokenizer token with the same string (WordPiece `##`
continuation pieces included, since a vocabulary built with that tokenizer contains them verbatim).
embinit's specials map to the tokenizer's own: `<pad>` -> pad, `<unk>` -> unk, `<bos>` -> cls or bos,
`<eos>` -> sep or eos, where the tokenizer has them. For tokens the source lacks, the mean of the rows of
the pieces the tokenizer splits them into is kept beside the aligned rows (for the `subword_mean` rule).

Works from a local folder or a hub id, pinned as `<id>@<revision>` or not (embinit.hf_cache); loading from
the hub needs the network (the error says so).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from embinit.content_hash import file_digest
from embinit.errors import EmbinitError, empty_tokenizer, hf_load_error, problems_error
from embinit.hf_cache import split_revision
from embinit.init.aligned import Aligned, wanted_keys
from embinit.vocab import BOS, EOS, PAD, SPECIAL_ROLES, UNK

def identity(name: str, cache_dir=None) -> dict:
    """What the cache keys on: a local folder's files by content (name, sha256: `content_hash.file_digest`,
    memoized on disk, the digests a trial key holds), or the hub id. By (name, size, mtime), another
    checkpoint of the same architecture copied over the folder with its mtimes (`rsync -a`, `cp -p`: every
    file the same size) was served the old one's rows; by content, a copy elsewhere is not aligned again."""
    p = Path(name).expanduser()
    if p.is_dir():
        return {"hf_folder_content": sorted((f.name, file_digest(f, cache_dir)) for f in p.iterdir() if f.is_file())}
    return {"hf_hub_id": name}


def _local_folder(name: str) -> Path | None:
    """The folder holding the model's files: the path itself, or its snapshot in the HF cache."""
    p = Path(name).expanduser()
    if p.is_dir():
        return p
    repo, revision = split_revision(name)
    try:
        from transformers.utils import cached_file
        config = cached_file(repo, "config.json", revision=revision, local_files_only=True,
                             _raise_exceptions_for_missing_entries=False)
    except Exception:  # not cached: the full load below downloads it
        return None
    return Path(config).parent if config else None


def embedding_tensor(folder: Path) -> tuple[Path, str] | None:
    """(safetensors file, tensor name) of a model folder's input embedding, or None. The name comes from
    the model class built on the meta device, so no name is guessed; the tensor's shape is checked."""
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModel
    with torch.device("meta"):
        model = AutoModel.from_config(AutoConfig.from_pretrained(folder))
    weight = model.get_input_embeddings().weight
    pname = next(n for n, p in model.named_parameters() if p is weight)
    keys = [pname, f"{model.base_model_prefix}.{pname}"]
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        files = [(folder / weight_map[k], k) for k in keys if k in weight_map]
    else:
        files = [(folder / "model.safetensors", k) for k in keys]
    for file, key in files:
        if file.is_file():
            with safe_open(str(file), "pt") as st:
                if key in st.keys() and tuple(st.get_slice(key).get_shape()) == tuple(weight.shape):
                    return file, key
    return None


def _weight_from_safetensors(folder: Path) -> torch.Tensor | None:
    """Only the input-embedding tensor, read from the checkpoint's safetensors (a big model such as
    mt5-base is ~2.3 GB in fp32; its embedding ~0.8 GB); None when this is not possible."""
    try:
        from safetensors import safe_open
        found = embedding_tensor(folder)
        if found is None:
            return None
        with safe_open(str(found[0]), "pt") as st:
            return st.get_tensor(found[1]).to(torch.float32)
    except Exception:  # any surprise: the full model load is the reference path
        return None


def load_model_embeddings(name: str):
    """(tokenizer, input-embedding matrix) of a Hugging Face model folder or hub id (pinned or not)."""
    try:
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging
    except ImportError as e:
        raise EmbinitError(f"Hugging Face sources need `transformers`: {e}") from None
    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()   # a progress bar per load would flood CLI output and logs
    try:
        repo, revision = split_revision(name)
        tok = AutoTokenizer.from_pretrained(repo, revision=revision)
        folder = _local_folder(name)
        weight = _weight_from_safetensors(folder) if folder else None
        if weight is None:
            model = AutoModel.from_pretrained(repo, revision=revision)
            weight = model.get_input_embeddings().weight.detach().to(torch.float32).clone()
    except Exception as e:
        from embinit.tasks.tokenization import sentencepiece_problem
        if (folder := _local_folder(name)) is not None and (why := sentencepiece_problem(folder)) is not None:
            raise EmbinitError(f"cannot load Hugging Face model {name!r}: {why}") from None
        raise hf_load_error(name, e) from None
    finally:
        if bar:
            hf_logging.enable_progress_bar()
    if (error := empty_tokenizer(tok, name)) is not None:
        raise error
    return tok, weight


def special_aliases(tok) -> dict[str, str]:
    """embinit's special -> the tokenizer's token that stands for it (`SPECIAL_ROLES`), where it has one."""
    pairs = {ours: [getattr(tok, role, None) for role in roles] for ours, roles in SPECIAL_ROLES.items()}
    return {ours: next(t for t in theirs if t) for ours, theirs in pairs.items() if any(theirs)}


def _piece_means(tok, weight: torch.Tensor, tokens: list[str], missing: list[int],
                 specials: set[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean source row of each missing token's pieces (a `##` continuation is split without `##`)."""
    idx = [i for i in missing if tokens[i] not in specials]
    texts = [tokens[i][2:] if tokens[i].startswith("##") and len(tokens[i]) > 2 else tokens[i] for i in idx]
    if not idx:
        return torch.zeros(0, dtype=torch.int64), torch.zeros(0, weight.shape[1])
    ids = tok(texts, add_special_tokens=False)["input_ids"]
    keep, rows = [], []
    for i, piece_ids in zip(idx, ids):
        piece_ids = [p for p in piece_ids if p != tok.unk_token_id and p < weight.shape[0]]
        if piece_ids:
            keep.append(i)
            rows.append(weight[piece_ids].double().mean(0).float())
    if not keep:
        return torch.zeros(0, dtype=torch.int64), torch.zeros(0, weight.shape[1])
    return torch.tensor(keep, dtype=torch.int64), torch.stack(rows)


def _check_finite(name: str, tokens: list[str], found: list[int], rows: torch.Tensor, piece_idx: torch.Tensor,
                  piece_rows: torch.Tensor) -> None:
    """One error naming every vocabulary token whose row (or subword mean) holds nan or inf, as the
    word-vector loaders refuse such rows: they would poison every statistic (a transform's mean and std,
    the table's) and the training that starts from them."""
    bad = [f"{tokens[i]!r} (source row)" for i, ok in zip(found, torch.isfinite(rows).all(1).tolist()) if not ok]
    bad += [f"{tokens[i]!r} (mean of its pieces' rows)"
            for i, ok in zip(piece_idx.tolist(), torch.isfinite(piece_rows).all(1).tolist()) if not ok]
    if bad:
        raise problems_error(Path(f"hf:{name}"), [f"hf:{name}: the input-embedding row of {b} has a "
                                                  "non-finite value (nan or inf)" for b in bad])


def load_hf(name: str, tokens: list[str], lowercase: bool = False) -> Aligned:
    tok, weight = load_model_embeddings(name)
    src_vocab = tok.get_vocab()
    aliases = special_aliases(tok)
    best: dict[int, tuple[int, int]] = {}
    for key, hits in wanted_keys(tokens, lowercase, aliases, encode=False).items():
        sid = src_vocab.get(key)
        if sid is None or sid >= weight.shape[0]:
            continue
        for idx, pri in hits:
            if idx not in best or pri < best[idx][0]:
                best[idx] = (pri, sid)
    found = sorted(best)
    rows = weight[[best[i][1] for i in found]] if found else torch.zeros(0, weight.shape[1])
    missing = [i for i in range(len(tokens)) if i not in best]
    piece_idx, piece_rows = _piece_means(tok, weight, tokens, missing, set(aliases) | {PAD, UNK, BOS, EOS})
    _check_finite(name, tokens, found, rows, piece_idx, piece_rows)
    return Aligned(rows.contiguous(), torch.tensor(found, dtype=torch.int64), int(weight.shape[1]),
                   f"hf:{name}", piece_idx, piece_rows)
