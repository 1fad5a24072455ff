"""The model's width D and head count, as a trial resolves them, and the plan-time check of them
(no torch).

D is the config's `d_model`, else the pretrained sources' D, else the task default; every pretrained side
must agree with it, and `heads` must divide it (`resolve_model_size`, which `train.prepare` applies to each
trial). `dimension_problems` applies the same rule to every planned trial before any starts, reading only
the D of sources that are local files or folders (a header, a first line, a .npy shape, a config.json):
a spec that sets `d_model: 512` for 300-d GloVe is refused with every such problem listed, instead of
each of its trials failing. A source named by a hub id is read from the hub cache's snapshot where that
is the one the trials read (a commit pin, or Hugging Face kept offline); other hub ids are left to the
trials (reading them needs the network)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Iterable

from embinit.config import TrialConfig, task_defaults
from embinit.errors import EmbinitError, trials_text
from embinit.task_registry import task_kind


class SizeError(EmbinitError):
    """A model size that cannot be resolved; `fields`: the config fields to change, where the problem
    lies in them alone (`d_model`, `heads`)."""

    def __init__(self, message: str, fields: tuple[str, ...] = ()):
        super().__init__(message)
        self.fields = fields


SIDE_NAMES = {"tok": "the init", "tgt": "the target init", "src": "the source init"}


def divisors(n: int) -> list[int]:
    return [k for k in range(1, min(n, 64) + 1) if n % k == 0]


def side_sources(cfg: TrialConfig) -> dict[str, tuple[Any, str | None]]:
    """Each embedding side of the trial's task -> (its init spec, its pretrained location): the source
    side of a translation task takes `src_init`/`src_pretrained`, else the target's."""
    sides = task_kind(cfg.task).sides
    out = {sides[-1]: (cfg.init, cfg.pretrained)}
    if "src" in sides:
        out["src"] = (cfg.src_init or cfg.init, cfg.src_pretrained or cfg.pretrained)
    return out


def resolve_model_size(cfg: TrialConfig, user_heads: int | None, dims: dict[str, int | None]) -> tuple[int, int]:
    """D: cfg.d_model, else the pretrained source's D, else the task default; every pretrained source
    must agree with it. Heads: cfg.heads must divide D; when heads was left at the task default and
    does not divide D, the divisor of D nearest the default is used (GloVe 300d: 10, as in the paper).
    A SizeError names every problem: a `d_model` the source's D contradicts and heads that divide
    neither are two."""
    known = {side: d for side, d in dims.items() if d is not None}
    if len(set(known.values())) > 1:
        raise EmbinitError(f"the pretrained sources disagree on the embedding dimension: {known}")
    d_model = cfg.d_model or next(iter(known.values()), None) or task_defaults(cfg.task).d_model
    # the sides agree on D (else refused above): those whose D is not d_model are one problem, said once
    wrong = [SIDE_NAMES.get(side, side) for side, d in known.items() if d != d_model]
    problems, fields = [], ()
    if wrong:
        d, their = next(iter(known.values())), "their" if len(wrong) > 1 else "the source's"
        problems.append(f"{' and '.join(wrong)} {'have' if len(wrong) > 1 else 'has'} dimension {d} but the model's "
                        f"d_model is {d_model}; set `d_model` to {their} D or leave it out ({their} D is used)")
        fields = ("d_model",)
    heads = cfg.heads
    if d_model % heads:
        if user_heads is None:
            heads = nearest_heads(d_model, heads)
        else:
            problems.append(f"heads={heads} does not divide d_model={d_model}; choose heads from "
                            f"{divisors(d_model)}" + "".join(
                                f" (or, with d_model left out, from {divisors(d)})"
                                for d in sorted(set(known.values())) if d != d_model and d % heads))
            fields += ("heads",)
    if problems:
        raise SizeError("; ".join(problems), fields)
    return d_model, heads


def nearest_heads(d_model: int, heads: int) -> int:
    """The divisor of D nearest `heads` (the larger on a tie)."""
    return min(divisors(d_model), key=lambda h: (abs(h - heads), -h))


def local_source_dim(init: Any, pretrained: str | None) -> int | None:
    """D of a pretrained side whose source is a local file or folder; None for a random init or a
    source only the hub (or a trial) can read. A local source that cannot be read raises EmbinitError."""
    from embinit.init.registry import parse_init_spec
    from embinit.init.source_files import source_dim, source_location
    spec = parse_init_spec(init)
    if not spec.is_pretrained:
        return None
    location = source_location(spec, pretrained)
    if location and not Path(location).expanduser().exists() and spec.is_subword:
        return _cached_dim(location)
    if not location or not Path(location).expanduser().exists():
        return None
    return source_dim(spec, location)


def _cached_dim(hub_id: str) -> int | None:
    """D from the config.json of the hub cache's snapshot of a sub-word source's hub id, where the trials
    read that very snapshot: pinned to a commit (a snapshot never changes), or Hugging Face kept offline
    (they read this cache). None otherwise (the hub may hold a newer `main`), and where the config names
    no width (the trials read it from the weights, which a check does not load)."""
    from embinit.hf_cache import COMMIT, offline, snapshot, split_revision
    from embinit.init.source_files import hf_dim
    revision = split_revision(hub_id)[1]
    if offline() is None and not (revision and COMMIT.fullmatch(revision)):
        return None
    folder = snapshot(hub_id)
    return hf_dim(str(folder)) if folder is not None and (folder / "config.json").is_file() else None


def dimension_problems(planned: Iterable[Any], search: Any = None,
                       place: Callable[[list, str], str | None] | None = None) -> list[tuple[str, str]]:
    """(where, what) for every planned trial (`PlannedTrial`s) whose model size cannot be resolved:
    a local pretrained source whose D differs from the `d_model` set for it, two sides that disagree,
    `heads` that does not divide D, a local source that cannot be read. Each distinct problem once, with
    the trials it concerns. `search`: the spec's search; an Optuna search's `d_model` and `heads` values
    are drawn while it runs, so each value its space allows is checked here (a grid's are in the plan).
    `place(trials, field)`: the spec's path that sets `field` for all of `trials`, or None; a problem in
    one field (a `d_model` the source's D contradicts) is said there, naming its trials, else at the trials."""
    dims: dict[tuple[str, str | None], int | None | str] = {}
    seen: dict[tuple, tuple[str, tuple[str, ...]] | None] = {}
    found: dict[tuple[str, tuple[str, ...]], list[Any]] = {}
    for p in planned:
        for c in _searched_variants(p.config, search):
            shape = tuple(c.get(k) for k in ("task", "init", "src_init", "pretrained", "src_pretrained",
                                             "d_model", "heads"))
            if shape not in seen:
                seen[shape] = _problem(TrialConfig.from_dict(c), dims)
            if seen[shape] is not None:
                found.setdefault(seen[shape], []).append(p)
    out = []
    for (why, fields), trials in found.items():
        names = trials_text(sorted({f"{p.task} x {p.label}" for p in trials}))
        loc = place(trials, fields[0]) if place is not None and len(fields) == 1 else None
        out.append((loc, f"{names}: {why}") if loc else (names, why))
    return out


def check_dimensions(planned: Iterable[Any], search: Any = None) -> None:
    """`dimension_problems` as a SpecError listing each (what `embinit run`, its dry run and a sweep
    refuse before anything runs or is written)."""
    from embinit.spec.problems import SpecError
    problems = dimension_problems(planned, search)
    if problems:
        raise SpecError(problems)


def _problem(cfg: TrialConfig, dims: dict) -> tuple[str, tuple[str, ...]] | None:
    """(why the trial's model size cannot be resolved, the fields it lies in alone), None when it can (or
    when D is only known to the hub); `dims` caches each source's D (or why it cannot be read)."""
    side_dims: dict[str, int | None] = {}
    for side, (init, pretrained) in side_sources(cfg).items():
        key = (str(init), pretrained)
        if key not in dims:
            try:
                dims[key] = local_source_dim(init, pretrained)
            except EmbinitError as e:
                dims[key] = str(e)
        if isinstance(dims[key], str):
            return dims[key], ()
        side_dims[side] = dims[key]
    try:
        resolve_model_size(cfg.resolved(), cfg.heads, side_dims)
    except SizeError as e:
        return str(e), e.fields
    except EmbinitError as e:
        return str(e), ()
    return None


MAX_SEARCHED_VALUES = 256   # an integer range wider than this is checked at its ends and a few points


def _searched_variants(config: dict, search: Any) -> list[dict]:
    """The trial's config once per combination of the `d_model`/`heads` values an Optuna search may
    draw (the config alone without such a search)."""
    if search is None or not search.drawn:
        return [config]
    variants = [config]
    for name in ("d_model", "heads"):
        values = _space_values(search.space.get(name))
        if values:
            variants = [{**v, name: x} for v in variants for x in values]
    return variants


def _space_values(space: Any) -> list:
    """The values a search space entry allows: a list's items, an integer range's integers (at most
    MAX_SEARCHED_VALUES of them, ends included), a float range's ends."""
    if space is None:
        return []
    if isinstance(space, list):
        return list(space)
    low, high = int(math.ceil(space.low)), int(math.floor(space.high))
    if space.type != "int":
        return [space.low, space.high]
    if high - low + 1 <= MAX_SEARCHED_VALUES:
        return list(range(low, high + 1))
    step = (high - low) / (MAX_SEARCHED_VALUES - 1)
    return sorted({low + round(i * step) for i in range(MAX_SEARCHED_VALUES)} | {high})
