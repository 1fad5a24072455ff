"""Checks of a spec's init entries against the rest of it (run once every field is valid): sides the
tasks lack, pretrained sources without a file and paths no side reads, an init's own OOV rule that fills no
row or that the spec's would replace, `subword_mean` on a source without a tokenizer, a transform that the
spec's would replace, and entries that duplicate another (same label, or the same trials).
`embinit.spec.checks` runs them with the other cross-field checks."""

from __future__ import annotations

from typing import Any

from embinit.errors import EmbinitError
from embinit.init.registry import DEFAULT_OOV, oov_applies, parse_init_spec
from embinit.init.source_files import resolve_source
from embinit.spec.fields import SpecFields
from embinit.spec.inits import INIT_AXES, InitEntry, init_string, no_oov_rows, source_name
from embinit.spec.planning import has_source_table, pretrained_for, trial_config


def needs_pretrained(source: str, how: str | None = None) -> str:
    """The problem of pretrained init `source` without its file; `how` to give one: a spec's two ways
    unless told (`embinit train` names its option)."""
    return (f"{source!r} needs a pretrained file: "
            + (how or f"set `pretrained: {{{source}: PATH}}` in the spec or `pretrained` on this init"))


def _side_problems(spec: SpecFields, i: int, init: InitEntry,
                   translation: bool) -> list[tuple[str, str]]:
    """A pretrained side needs a source path (file formats have no default); options the trial
    config cannot carry are refused rather than silently dropped."""
    out = []
    sides = [("tgt", init.tgt, init.pretrained)]
    if init.src is not None and translation:
        sides.append(("src", init.src, init.src_pretrained))
    for side, value, explicit in sides:
        where = f"inits[{i}].{side}" if init.src is not None else f"inits[{i}]"
        source = source_name(value)
        path = explicit or init.side_option(side, "pretrained")
        if source and pretrained_for(spec, value, path) is None:
            out.append((where, needs_pretrained(source)))
        if init.side_option(side, "lowercase"):
            out.append((where + ".lowercase", "lowercase lookup cannot be set per init in a spec yet"))
    # a path no side reads would name a file the trials never used (a Xavier run "with" a GloVe file)
    for field, side, value in (("pretrained", "tgt", init.tgt), ("src_pretrained", "src", init.src)):
        path = getattr(init, field)
        if path is not None and (value is None or not source_name(value) or (side == "src" and not translation)):
            which = f"the {side} init" if init.src is not None else "the init"
            what = (f"{which} {init_string(value)!r} draws from no pretrained source" if value is not None
                    else "there is no `src` init")
            out.append((f"inits[{i}].{field}", f"{path!r} is set but {what}, so no table reads it; "
                        "remove it or use a pretrained init (e.g. glove)"))
    return out


def init_problems(spec: SpecFields) -> list[tuple[str, str]]:
    """Sides the tasks lack, pretrained sources without a file, and inits that duplicate another."""
    problems: list[tuple[str, str]] = []
    translation = any(has_source_table(t.task) for t in spec.tasks)
    seen: dict[Any, int] = {}
    for i, init in enumerate(spec.inits):
        if init.src is not None and not translation:
            problems.append((f"inits[{i}].src", "only translation tasks have a source side; tasks "
                             f"{[t.task for t in spec.tasks]} have one embedding table"))
        problems += _side_problems(spec, i, init, translation)
        problems += _init_axis_clash(spec, i, init) + _own_oov_clash(spec, i, init)
        problems += _own_oov_moot(i, init, translation) + _subword_mean_problems(spec, i, init)
        label = init.label_for(translation)
        # Two entries that compute the same trials (same key for some task) would train and report
        # one thing twice, e.g. `glove` and `{source: glove, name: X}` with the same file.
        same = [("key", t.task, trial_config(spec, t, init, spec.seeds[0]).key()) for t in spec.tasks]
        for other in (*same, ("label", label)):
            if other in seen:
                why = ("remove it or give it its own `label` (beside `tgt`: `{tgt: ..., label: ...}`; an init "
                       "written as `{source: ...}` takes none)" if other[0] == "label"
                       else "remove it: it trains the same trials" + _only_on(seen[other], same, seen))
                problems.append((f"inits[{i}]", f"duplicates inits[{seen[other]}] (label {label!r}); {why}"))
                break
        for other in (*same, ("label", label)):
            seen.setdefault(other, i)
    return problems


def _only_on(j: int, same: list[tuple], seen: dict[Any, int]) -> str:
    """' on sst2' where an init's trials are inits[j]'s on some of the tasks only (a translation task trains
    `glove` and `{tgt: glove, src: xavier}` apart; a classifier, with one table, alike); '' on every task."""
    alike = [task for _, task, key in same if seen.get(("key", task, key)) == j]
    return "" if len(alike) == len(same) else f" on {', '.join(alike)} (not on the other tasks)"


def _own_oov_clash(spec: SpecFields, i: int, init: InitEntry) -> list[tuple[str, str]]:
    """An init with its own OOV rule (`{source: glove, oov: zeros}`) in a spec that sets `oov` elsewhere: that
    value replaces the init's in every trial (`planning.trial_config`), so the init's rule would do nothing
    while its label names it, and its trials would be another init's (`glove` at `oov: zeros`) twice."""
    own = init.side_option("tgt", "oov")
    if own is None:
        return []
    search = spec.search.space if spec.search is not None else {}
    places = (["axes.oov"] if "oov" in spec.axes else []) + (["search.space.oov"] if "oov" in search else []) + (
        ["defaults.oov"] if "oov" in spec.defaults.set_values() else []) + [
        f"tasks[{j}].oov" for j, task in enumerate(spec.tasks) if "oov" in task.set_values()]
    return [(f"inits[{i}]", f"its own oov {own!r} is replaced by the rule {', '.join(places)} sets (for every init), "
             f"so its trials would not use it: drop one of the two")] if places else []


def _own_oov_moot(i: int, init: InitEntry, translation: bool) -> list[tuple[str, str]]:
    """An init with its own OOV rule (`{source: glove, transform: match, oov: zeros}`, `{source: xavier, oov:
    mean}`) none of whose tables has a row a rule fills (`oov_applies`): the rule would do nothing, its
    trials are the default rule's (same key) and its label does not name it. An `oov` axis over such an
    init is harmless (it trains the init once); a rule written on the init itself is a mistake, unless it is
    the default (`oov: xavier`), which names nothing the trials do not do."""
    own = init.side_option("tgt", "oov")
    sides = [init.tgt] + ([init.src] if translation and init.src is not None else [])
    if own in (None, DEFAULT_OOV) or any(oov_applies(side) for side in sides):   # the default written out: harmless
        return []
    where = f"inits[{i}].tgt" if init.src is not None else f"inits[{i}]"
    tables = "its table has" if len(sides) == 1 else "its tables have"
    return [(f"{where}.oov", f"its own oov {own!r} does nothing: {tables} no row for an OOV rule to fill "
             f"({init.label_for(translation)}: {no_oov_rows(sides)}), so its trials are the same whatever the "
             "rule; remove it")]



def _init_axis_clash(spec: SpecFields, i: int, init: InitEntry) -> list[tuple[str, str]]:
    """An init whose target table already has the transform an init axis appends (`rescale=` under
    `axes: {sigma: ...}`): the axis's would replace it, so the init's own would do nothing and its label
    would name a scale no trial has."""
    own = parse_init_spec(init.tgt).transforms
    return [(f"inits[{i}]", f"its target table already has {token!r}, and the {name} axis appends "
             f"{transform}=<value> to every init, which replaces it: drop one of the two")
            for name, transform in INIT_AXES.items() if name in spec.axes
            for token in own if token.partition("=")[0] == transform]


def _subword_mean_problems(spec: SpecFields, i: int, init: InitEntry) -> list[tuple[str, str]]:
    """`oov: subword_mean` (the init's own, the task's, `defaults`' or an `oov` axis or search value) on a
    table whose source has no tokenizer to split a missing word into pieces (a GloVe, word2vec, fastText or
    .npy file): every such trial failed when it built its table, after the spec's check had passed it."""
    search = spec.search.space.get("oov") if spec.search is not None else None
    points = [("axes.oov", {"oov": v}) for v in spec.axes.get("oov", [])] + [
        ("search.space.oov", {"oov": v}) for v in (search if isinstance(search, list) else [])]
    out: list[tuple[str, str]] = []
    for task in spec.tasks:
        for where, point in points or [(f"inits[{i}]", {})]:
            cfg = trial_config(spec, task, init, spec.seeds[0], point)
            if cfg.oov != "subword_mean":
                continue
            sides = [(cfg.init, cfg.pretrained)] + ([(cfg.src_init, cfg.src_pretrained or cfg.pretrained)]
                                                     if cfg.src_init else [])
            for side, path in sides:
                word_file = _word_vector_file(side, path)
                if word_file is not None:
                    out.append((where, f"oov 'subword_mean' needs a source with a tokenizer (bert, mbert, t5, "
                                f"mt5, hf), but {init.label_for(cfg.src_init is not None)} ({task.task}) reads "
                                f"{side!r} from {word_file}, a word-vector file without one, so its trials would "
                                "fail: use another rule for it (mean, mean_cov, focus, zeros, xavier)"))
    return list(dict.fromkeys(out))


def _word_vector_file(side: str, path: str | None) -> str | None:
    """The file of a table's pretrained source when an OOV rule fills rows of it and it has no tokenizer (a
    word-vector file); None otherwise (a random or `match`ed table, a sub-word source, or a source that
    cannot be resolved, which other checks name)."""
    spec = parse_init_spec(side)
    if not spec.is_pretrained or spec.is_subword or not oov_applies(spec):
        return None
    try:
        kind, location = resolve_source(spec, path)
    except EmbinitError:
        return None
    return None if kind == "hf" else location
