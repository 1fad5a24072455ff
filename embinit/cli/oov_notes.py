"""What a dry run says of an `oov` axis or grid-search field over a sub-word init whose data its source's
own tokenizer cuts (`tokenizer: auto`, or the same model named): every vocabulary token is then one of the
tokenizer's and has its source row, and embinit's specials take the tokenizer's own (`<pad>` -> pad,
`<unk>` -> unk, `<bos>` -> cls or bos, `<eos>` -> sep or eos: embinit.init.hf `special_aliases`). Where
the tokenizer has all four (BERT's [PAD], [UNK], [CLS], [SEP]), no row is left for an OOV rule, and the
trials of each rule are one computation under as many keys (coverage 100%: the offline SST-2 MiniLM runs).

The planning cannot know this without the tokenizer's files (T5's has no cls or bos token: its `<bos>` row
is the rule's, and its rules differ), so it plans every rule (embinit.spec.planning `moot_axes` collapses
only what the spec itself says: a random init, a `match`ed table) and the dry run reads the files and says
so. Tasks of one table only: a translation's source side is cut by a tokenizer of its own choosing."""

from __future__ import annotations

import json
from pathlib import Path

from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.hf_cache import snapshot
from embinit.init.registry import parse_init_spec
from embinit.task_registry import task_kind
from embinit.vocab import SPECIAL_ROLES as ROLES

FILES = ("tokenizer_config.json", "special_tokens_map.json")   # the later file's value wins, as in transformers


def tokenizer_specials(location: str) -> set[str] | None:
    """embinit's specials (ROLES) a tokenizer has a token for, read from the special-token entries of its
    folder (a local folder, or a hub id's snapshot in the cache); None where neither file is there."""
    folder = Path(location).expanduser()
    if not folder.is_dir():
        folder = snapshot(location)
        if folder is None:
            return None
    entries: dict = {}
    for name in FILES:
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            entries.update({k: v for k, v in data.items() if k.endswith("_token") and v})
    if not entries:
        return None

    def has(role: str) -> bool:
        value = entries.get(role)
        return bool(value.get("content") if isinstance(value, dict) else value)
    return {ours for ours, roles in ROLES.items() if any(has(r) for r in roles)}


def _same(a: str, b: str) -> bool:
    pa, pb = Path(a).expanduser(), Path(b).expanduser()
    return pa.resolve() == pb.resolve() if pa.is_dir() and pb.is_dir() else a == b


def own_source(config: dict) -> str | None:
    """The source of a one-table trial's sub-word init when its own tokenizer cuts the data, else None."""
    try:
        cfg = TrialConfig.from_dict(config)
        spec = parse_init_spec(cfg.init)
    except (EmbinitError, TypeError):
        return None
    if len(task_kind(cfg.task).sides) != 1 or not spec.is_subword:
        return None
    source = cfg.source_of(spec)
    return source if _same(cfg.tokenizer_for(spec), source) else None


def own_tokenizer_lines(plan) -> list[str]:
    """A note for each (task, init) whose trials an `oov` axis or search field multiplies although its
    table has no row for a rule (its own tokenizer has all of embinit's specials)."""
    groups: dict[tuple[str, str], tuple[dict, set]] = {}
    for p in plan:
        rule = {**p.axes, **p.point}.get("oov")
        if rule is not None:
            groups.setdefault((p.task, p.label), (p.config, set()))[1].add(rule)
    lines = []
    for (task, label), (config, rules) in groups.items():
        if len(rules) < 2 or (source := own_source(config)) is None:
            continue
        if tokenizer_specials(source) != set(ROLES):
            continue
        lines.append(f"note: {task} x {label} trains once per oov value ({', '.join(sorted(map(str, rules)))}), "
                     f"but its data is cut by its source's own tokenizer ({source}), which has a token for each "
                     "of embinit's specials: every row of its table is the source's, none is left for an OOV rule, "
                     "and those trials are one computation under different keys. Run it in a spec without the "
                     "oov axis to train it once")
    return lines
