"""K and the neighbour measure behind a run's logged KNN match similarity (`sim/knn_*`), read from what
was recorded, for the sections that show that similarity (embinit.reproduction.similarity, .blog).

The similarity settings are the spec's `analyses.similarity` (`k`, and `neighbours`: `dot` is the inner
product, `cosine`), kept outside the trial config so that switching an analysis on does not change trial
keys. A trial run records them itself, as the tags `embinit.similarity.k` and `.neighbours`
(`TrialRecord.similarity`, written by the sweep that trained it: embinit.sweep.analyses.run_tags); those
are read first. An older run lacks them: its settings are then read from the spec the sweep run that
trained it recorded, its `spec.yaml` artifact (the trial's `embinit.sweep_run` tag,
`TrialRecord.parent_id`). A run with neither counts as not recorded, and the text says so rather than
assume the defaults; runs that disagree are all named, and a run a rerun continued under other settings
(its `embinit.similarity.changed` tag) is named with what changed (`changed_text`)."""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable

from embinit.tracking.records import TrialRecord
from embinit.tracking.run_records import StoredSpec, SweepRecord

MEASURE_TEXT = {"dot": "inner product", "cosine": "cosine"}   # analysis.neighbours.NEIGHBOUR_METRICS

Setting = tuple[int, str]   # (K, the neighbour measure as the spec names it)


def _run_setting(trial: TrialRecord) -> Setting | None:
    """(k, neighbours) the trial run recorded in its own tags; None when it has not both (an older run)."""
    k, measure = trial.similarity.get("k", ""), trial.similarity.get("neighbours")
    return (int(k), measure) if k.isdigit() and measure else None


def _sweep_setting(stored: StoredSpec | None) -> Setting | None:
    """(k, neighbours) of the spec a sweep run recorded; None where it cannot be read or has no
    similarity analysis."""
    spec = stored.spec if stored is not None else None
    sim = spec.analyses.similarity if spec is not None and spec.analyses else None
    return None if sim is None else (sim.k, sim.neighbours)


def run_settings(trials: Iterable[TrialRecord], sweeps: Iterable[SweepRecord],
                 spec_of: Callable[[SweepRecord], StoredSpec | None]) -> dict[str, Setting | None]:
    """{run id: (K, neighbour measure)} of each trial: the settings its run recorded (its
    `embinit.similarity.*` tags), else, for a run from before those tags, the spec of the sweep run that
    trained it (one of `sweeps`, read by `spec_of`: `ReproductionData.sweep_spec`, once per document);
    None where neither is recorded. A sweep's spec is read only for the runs that lack their own."""
    by_id = {s.run_id: s for s in sweeps}
    out = {}
    for t in trials:
        own = _run_setting(t)
        sweep = by_id.get(t.parent_id or "") if own is None else None
        out[t.run_id] = own if own is not None else _sweep_setting(spec_of(sweep)) if sweep is not None else None
    return out


def setting_text(setting: Setting) -> str:
    k, measure = setting
    return f"K = {k}, {MEASURE_TEXT.get(measure, measure)}"


def settings_text(settings: Iterable[Setting | None]) -> str:
    """What the runs used: `K = 10, inner product` when all that recorded it agree; each setting with its
    number of runs when they disagree; and how many runs recorded none (all: "K and the neighbour
    measure not recorded")."""
    counts = Counter(settings)
    unknown = counts.pop(None, 0)
    if not counts:
        return "K and the neighbour measure not recorded (not on the runs, nor in a sweep run's spec.yaml)"
    if len(counts) == 1:
        text = setting_text(next(iter(counts)))
    else:
        text = "the runs differ: " + "; ".join(f"{setting_text(s)} ({_runs(n)})" for s, n in sorted(counts.items()))
    if unknown:
        text += f"; not recorded for {_runs(unknown)}"
    return text


def changed_text(trials: Iterable[TrialRecord]) -> str:
    """`; ...` naming the runs a rerun continued under other similarity settings after they had logged
    points (their `embinit.similarity.changed` tag): the settings shown are their latest, and their
    curves mix the two; "" when there are none."""
    changed = [f"{t.run_id[:8]}: {t.similarity['changed']}" for t in trials if t.similarity.get("changed")]
    if not changed:
        return ""
    one = len(changed) == 1
    return (f"; the settings changed during training in {_runs(len(changed))} (a rerun continued "
            f"{'it' if one else 'them'} under another spec), so {'its' if one else 'their'} curves mix "
            "settings: " + "; ".join(changed))


def _runs(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"
