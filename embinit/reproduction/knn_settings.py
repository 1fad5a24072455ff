"""K and the neighbour measure behind a run's logged KNN match similarity (`sim/knn_*`), read from what
was recorded, for the sections that show that similarity (embinit.reproduction.similarity, .blog).

A trial run records neither: its similarity settings are the spec's `analyses.similarity` (`k`, and
`neighbours`: `dot` is the inner product, `cosine`), kept outside the trial config so that switching an
analysis on does not change trial keys. The spec is recorded as the `spec.yaml` artifact of the sweep
run that trained the trial (the trial's `embinit.sweep_run` tag, `TrialRecord.parent_id`), so that is
where they are read. A run whose sweep run or spec cannot be read counts as not recorded, and the text
says so rather than assume the defaults; runs that disagree are all named."""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from embinit.errors import EmbinitError
from embinit.tracking.records import TrialRecord
from embinit.tracking.run_readers import sweep_spec
from embinit.tracking.run_records import SweepRecord

MEASURE_TEXT = {"dot": "inner product", "cosine": "cosine"}   # analysis.neighbours.NEIGHBOUR_METRICS

Setting = tuple[int, str]   # (K, the neighbour measure as the spec names it)


def _sweep_setting(sweep: SweepRecord, uri: str | None) -> Setting | None:
    """(k, neighbours) of the spec the sweep run recorded; None where it cannot be read or has no
    similarity analysis."""
    try:
        stored = sweep_spec(sweep, uri)
    except EmbinitError:   # no spec.yaml, or unreadable
        return None
    sim = stored.spec.analyses.similarity if stored.spec is not None and stored.spec.analyses else None
    return None if sim is None else (sim.k, sim.neighbours)


def run_settings(trials: Iterable[TrialRecord], sweeps: Iterable[SweepRecord],
                 uri: str | None) -> dict[str, Setting | None]:
    """{run id: (K, neighbour measure)} of each trial, from the spec of the sweep run that trained it
    (one of `sweeps`); None where that is not recorded. Each sweep's spec is read once."""
    by_id = {s.run_id: s for s in sweeps}
    read: dict[str, Setting | None] = {}
    out = {}
    for t in trials:
        sweep = by_id.get(t.parent_id or "")
        if sweep is not None and sweep.run_id not in read:
            read[sweep.run_id] = _sweep_setting(sweep, uri)
        out[t.run_id] = read[sweep.run_id] if sweep is not None else None
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
        return "K and the neighbour measure not recorded (no sweep run's spec.yaml to read them from)"
    if len(counts) == 1:
        text = setting_text(next(iter(counts)))
    else:
        text = "the runs differ: " + "; ".join(f"{setting_text(s)} ({_runs(n)})" for s, n in sorted(counts.items()))
    if unknown:
        text += f"; not recorded for {_runs(unknown)}"
    return text


def _runs(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"
