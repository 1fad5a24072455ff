"""The reproduction's "How it was run" section, from what MLflow stored for each sweep (issue 22 item
6): the sweep's `spec.yaml` artifact, the command line, the machine and the devices its trials trained
on, the date, the wall-clock, and the embinit version and commit (embinit.tracking.provenance). Nothing in it is
a template: a sweep recorded before embinit kept one of these says "not recorded"."""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from embinit.tracking import mlflow_store, provenance, run_readers
from embinit.reproduction.compare import duration
from embinit.reproduction.export import Section
from embinit.reproduction.inputs import load_trials
from embinit.tracking.run_records import StoredSpec, SweepRecord

if TYPE_CHECKING:
    from embinit.reproduction.data import ReproductionData


def _when(ms: int | None) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if ms else "—"


def device_counts(exp_id: str, uri: str | None) -> dict[str, Counter]:
    """The devices each sweep's trials trained on (`embinit.device` tags), counted, by sweep run id: the
    experiment's trial runs read once for all its sweeps (a read per sweep read them all each time)."""
    out: dict[str, Counter] = defaultdict(Counter)
    for t in run_readers.trial_records(exp_id, uri):
        out[t.parent_id][t.device or provenance.NOT_RECORDED] += 1
    return out


def devices(found: Counter) -> str:
    """The devices a sweep's trials trained on, with counts (`found`: the sweep's `device_counts`)."""
    return ", ".join(f"{d} ({n} trial{'s' if n != 1 else ''})" for d, n in found.most_common()) or "no trials"


def _spec_summary(stored: StoredSpec | None) -> str:
    """What the sweep's recorded spec ran (`ReproductionData.sweep_spec`): 'missing' without the artifact."""
    if stored is None:
        return "missing"
    spec = stored.spec
    if spec is None:
        why = stored.problem or ""
        return f"it does not load in this version of embinit: {why[:300] + ('...' if len(why) > 300 else '')}"
    return (f"name `{spec.name}`, tasks {', '.join(t.task for t in spec.tasks)}, {len(spec.inits)} inits, "
            f"seeds {spec.seeds}")


def sweep_lines(rep: ReproductionData, exp: str, run: SweepRecord, trials: list,
                found: Counter) -> tuple[list[str], dict]:
    """The lines describing one sweep run, and its row for the exports (`found`: its trials' devices,
    its entry of `device_counts`, which reads the experiment's trials once for all its sweeps)."""
    how = provenance.read(run.tags)
    own = [t for t in trials if t.parent_id == run.run_id and t.end_ms]
    wall = (run.end_ms - run.start_ms) / 1000 if run.end_ms else None
    busy = sum((t.end_ms - t.start_ms) / 1000 for t in own)
    stored = rep.sweep_spec(run)   # read once per document (the similarity sections read it too)
    lines = [f"**`{exp}`, sweep run `{run.name}`** (run id `{run.run_id}`, {run.status})", "",
             f"- started {_when(run.start_ms)}; wall-clock {duration(wall)}; "
             f"{run.n_trials or '?'} trials planned, {len(own)} trained in this sweep "
             f"(trial time {duration(busy)})",
             f"- command: `{how['command']}`",
             f"- machine: {how['machine']}; devices: {devices(found)}",
             f"- embinit {how['version']}, commit `{how['commit']}`",
             f"- spec: the run's `spec.yaml` artifact ({_spec_summary(stored)}"
             f", spec hash `{run.spec_hash or '?'}`)"]
    if stored is not None and stored.text:
        lines += ["", "<details><summary>spec.yaml</summary>", "", "```yaml", stored.text.rstrip(), "```", "",
                  "</details>"]
    row = {"experiment": exp, "run_id": run.run_id, "status": run.status, "started": _when(run.start_ms),
           "wall_s": wall, "trial_s": busy, "trials": len(own), **how}
    return lines + [""], row


def _analogy_lines(rep: ReproductionData) -> list[str]:
    runs = sorted(rep.analogy_runs, key=lambda r: r.start_ms)
    if not runs:
        return []
    how = [provenance.read(r.tags) for r in runs]
    commands = sorted({h["command"] for h in how})
    dur = sum(r.metrics.get("wall_time_s", ((r.end_ms or r.start_ms) - r.start_ms) / 1000) for r in runs)
    return [f"**Table 4: `{rep.inputs.analogy_experiment}`**, {len(runs)} `analogy` runs", "",
            f"- started {_when(runs[0].start_ms)} to {_when(runs[-1].start_ms)}; "
            f"{duration(dur)} in all",
            *[f"- command: `{c}`" for c in commands],
            f"- machine: {'; '.join(sorted({h['machine'] for h in how}))}; embinit "
            f"{', '.join(sorted({h['version'] for h in how}))}, commit "
            f"{', '.join(f'`{c}`' for c in sorted({h['commit'] for h in how}))}", ""]


def _experiments_read(rep: ReproductionData):
    """(experiment, (trials, sweep runs)) for the paper's groups, then the studies beyond the paper."""
    yield from rep.data.items()
    for exp in (rep.inputs.dose_experiment, rep.inputs.oov_experiment):
        if exp not in rep.data and mlflow_store.experiment_id(exp, rep.uri) is not None:
            yield exp, load_trials(exp, rep.uri)


def how_it_was_run(rep: ReproductionData) -> Section:
    s = Section("How it was run")
    s.lines += ["Read from each sweep's MLflow run: its command, machine, version and spec as recorded when "
                "it ran; the devices are those its trials report. 'trial time' is the sum of the trials' "
                "own durations (trials run side by side, so it can exceed the wall-clock).", ""]
    rows = []
    for exp, (trials, parents) in _experiments_read(rep):
        found = device_counts(parents[0].experiment_id, rep.uri) if parents else {}
        for run in parents:
            lines, row = sweep_lines(rep, exp, run, trials, found.get(run.run_id, Counter()))
            s.lines += lines
            rows.append(row)
    if not rows:
        s.lines.append("No sweep runs in the experiments read.")
    s.lines += _analogy_lines(rep)
    rep.exports["runs"] = rows
    return s
