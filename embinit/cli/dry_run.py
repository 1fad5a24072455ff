"""What `embinit run SPEC --dry-run` prints: the expanded trials, and per model shape the epochs, the
model size (parameters, built once on the CPU with tiny tables) and the cost in trial-epochs, with
the rounds it takes at the parallelism this machine gives the spec."""

from __future__ import annotations

import json
import math
import os
import statistics
from collections import Counter
from typing import NamedTuple

from embinit.tracking.records import RESULT   # a trial run's statuses with a result (MLflow's FINISHED)
from embinit.config import TrialConfig, task_defaults
from embinit.redact import masked
from embinit.cli.hub_notes import hub_notes
from embinit.cli.oov_notes import own_tokenizer_lines
from embinit.cli.dry_run_store import (Resume, experiment_trials, finished_here, local_store, readable_store,
                                       resumes, retired_folders, retired_lines, server_store, store_lines)
from embinit.tracking.store_check import resolved
from embinit.spec.planning import has_source_table, moot_inits


def trial_lines(spec, plan, done: set[str] = frozenset(), resumed: dict[str, Resume] | None = None) -> list[str]:
    """One line a planned trial; `done`: the keys the store has finished (marked: the run reuses them);
    `resumed`: what the run does with a key's unfinished run (`dry_run_store.resumes`)."""
    lines = [f"{'#':>4}  {'key':16}  {'task':24} {'init':22} seed  settings"]
    for i, p in enumerate(plan):
        # the source table's init, which the label leaves out where it is Xavier or the target's own
        src = {"src": p.config.get("src_init") or p.config["init"]} if has_source_table(p.task) else {}
        settings = {**src, **p.axes, **p.point}
        mark = ("  [finished: reused]" if p.key in done else f"  [{resumed[p.key].mark}]" if p.key in (resumed or {})
                else "")
        lines.append(f"{i:>4}  {p.key}  {p.task:24} {p.label:22} {p.seed:>4}  "
                     f"{json.dumps(settings) if settings else ''}{mark}".rstrip())
    for place, inits in moot_inits(spec).items():
        per = "per seed" if place.startswith("axis ") else "per seed and grid point of the other fields"
        lines.append(f"{place} does not apply to {', '.join(inits)}: no table of theirs has rows an OOV rule "
                     f"fills (a random init draws every row, match replaces every row), so each is trained once "
                     f"{per}, not once per {place.rpartition('.')[2].rpartition(' ')[2]} value")
    if spec.drawn:
        lines.append(f"optuna: {spec.search.num_samples} points x {len(spec.seeds)} seeds for each of the "
                     f"{len(plan) // len(spec.seeds)} (task, init, axes) groups above, drawn while running")
    return lines


def _d_model(cfg: TrialConfig) -> int | str:
    """D as the trainer resolves it: the config's, else the pretrained source's, else the task default."""
    if cfg.d_model:
        return cfg.d_model
    from embinit.init import source_dim
    for init, pretrained in ((cfg.init, cfg.pretrained), (cfg.src_init, cfg.src_pretrained or cfg.pretrained)):
        if init is None:
            continue
        try:
            d = source_dim(init, pretrained)
        except Exception:  # a source not reachable here (a hub id offline): the trial will know
            return "D of the pretrained source"
        if d:
            return d
    return task_defaults(cfg.task).d_model


class Shape(NamedTuple):
    """What a trial's cost depends on: the model, its data, its schedule and its batching."""
    task: str
    d: int | str
    heads: int
    layers: int
    ff: int
    epochs: int
    tie: bool
    max_train_examples: int | None
    batch_size: int
    max_tokens: int | None

    @property
    def model(self) -> tuple:
        """The shape without its schedule (epochs) and batching (batch_size, max_tokens)."""
        return (self.task, self.d, self.heads, self.layers, self.ff, self.tie, self.max_train_examples)

    @property
    def batching(self) -> tuple:
        return (self.batch_size, self.max_tokens)


def shape_of(cfg: TrialConfig) -> Shape:
    r = cfg.resolved()
    return Shape(r.task, _d_model(r), r.heads, r.layers, r.ff_dim, r.epochs, r.tie_embeddings,
                 r.max_train_examples, r.batch_size, r.max_tokens)


def _size(shape: Shape) -> str:
    task, d, heads, layers, ff, tie = shape.task, shape.d, shape.heads, shape.layers, shape.ff, shape.tie
    if not isinstance(d, int):
        return "? (D comes from the pretrained source)"
    from embinit.errors import EmbinitError
    from embinit.model_dims import nearest_heads
    from embinit.models import ModelConfig
    from embinit.models.size import model_size
    if d % heads:
        heads = nearest_heads(d, heads)
    try:
        size = model_size(task_defaults(task).kind, ModelConfig(d_model=d, heads=heads, layers=layers, ff_dim=ff,
                                                        tie_embeddings=tie))
    except EmbinitError as e:
        return f"? ({e})"
    return size.text()


def gpus_here() -> int:
    """The CUDA devices this machine has (CUDA_VISIBLE_DEVICES applies), as a Ray started here counts them."""
    import torch
    return torch.cuda.device_count()


def parallelism(spec) -> tuple[int, str]:
    """(trials at a time on this machine, why): its CPUs and, where a trial asks for GPUs, its GPUs, over
    what one trial asks; 0 where a trial asks for GPUs and the machine has none (`embinit run` here stops
    at once, `RayRuntime.check_fits`)."""
    cpus = os.cpu_count() or 1
    k = max(1, int(cpus // spec.resources.cpus))
    why = f"{cpus} CPUs / {spec.resources.cpus:g} per trial"
    if spec.resources.gpus > 0:
        gpus = gpus_here()
        by_gpu = int(gpus / spec.resources.gpus + 1e-9)   # 1 / 0.25: 4, not 3.9999
        if by_gpu < k:
            k, why = by_gpu, f"{gpus} GPU{'' if gpus == 1 else 's'} / {spec.resources.gpus:g} per trial"
    if spec.max_concurrent and spec.max_concurrent < k:
        k, why = spec.max_concurrent, f"max_concurrent {spec.max_concurrent}"
    return k, why


def epoch_s(shape: Shape, past: dict[tuple, list[tuple]]) -> tuple[float | None, str]:
    """(seconds per epoch, "" measured at this batching | "~" scaled from another batch_size), or
    (None, ""). An epoch is ceil(N / batch_size) steps: a trial at batch 8 takes 8x the steps of one at
    64, each cheaper; scaling by the step count assumes equal seconds per step, the case of small models
    whose step time is overhead (a GPU), and an upper bound where compute dominates (a CPU)."""
    seen = past.get(shape.model, [])
    same = [s for batching, s in seen if batching == shape.batching]
    if same:
        return statistics.median(same), ""
    batch, max_tokens = shape.batching
    scaled = [s * b / batch for (b, t), s in seen if t is None and max_tokens is None and b and batch]
    return (statistics.median(scaled), "~") if scaled else (None, "")


def past_epoch_s(uri: str | None, read: dict[str, list] | None = None) -> dict[tuple, list[tuple]]:
    """Seconds per epoch of the finished trials already in the tracking store at `uri`, by model shape
    (epochs and batching left out), each with its (batch_size, max_tokens); None: no store to read
    (`readable_store`). `read`: experiment id -> its trial records, where the caller has read them."""
    if uri is None:
        return {}
    from embinit.tracking import mlflow_store, run_readers
    read = read or {}
    out: dict[tuple, list[tuple]] = {}
    for exp in mlflow_store.client(uri).search_experiments():
        recs = ([r for r in read[exp.experiment_id] if r.status in RESULT] if exp.experiment_id in read else
                run_readers.trial_records(exp.experiment_id, uri, status="FINISHED"))
        for rec in recs:
            wall = rec.metrics.get("wall_time_s")
            try:
                shape = shape_of(TrialConfig.from_dict(rec.config))
            except Exception:  # a config of an older embinit, or a source not reachable here
                continue
            if wall and shape.epochs:
                out.setdefault(shape.model, []).append((shape.batching, wall / shape.epochs))
    return out


def cost_lines(spec, plan, uri: str | None, done: set[str] = frozenset(), read: dict[str, list] | None = None,
               resumed: dict[str, Resume] | None = None) -> list[str]:
    """Per model shape: trials, epochs, size, and the seconds per epoch measured before in the store at
    `uri` (None: none read; `read`: the trial records of experiments already read, by id); then the total
    in trial-epochs and rounds, and a wall-clock estimate where every shape was measured. Trials in
    `done` (finished in the store: reused) cost nothing and are left out; a trial in `resumed` costs the
    epochs after its checkpoint's."""
    todo = [(p.key, TrialConfig.from_dict(p.config)) for p in plan if p.key not in done]
    if done:
        head = ["", f"{len(done)} of the {len(todo) + len(done)} trials already finished in experiment "
                     f"{spec.experiment_name()!r} of this store: the run reuses them (marked above)"]
        if not todo:
            return head + ["  nothing left to train."]
    else:
        head = []
    shaped = [(key, shape_of(cfg)) for key, cfg in todo]   # once each: D may come from a pretrained file
    shapes = Counter(shape for _, shape in shaped)
    # epochs each trial still trains: a resumed one after its checkpoint's epoch
    resumed = resumed or {}
    left: Counter = Counter()
    for key, shape in shaped:
        trained = resumed[key].epoch or 0 if key in resumed else 0
        left[shape] += max(0, shape.epochs - trained)
    past = past_epoch_s(uri, read)
    lines = head + ["", "cost, per model shape" + (" (the trials left to train):" if done else ":"),
             f"  {'trials':>6}  {'epochs':>6}  {'task':22} {'D':>4} {'layers':>6}  {'s/epoch':>8}  model size"]
    per_epoch, scaled = {}, False
    for shape, n in shapes.items():
        per_epoch[shape], mark = epoch_s(shape, past)
        scaled |= mark == "~"
        measured = f"{mark}{_seconds(per_epoch[shape])}" if per_epoch[shape] is not None else "?"
        lines.append(f"  {n:>6}  {shape.epochs:>6}  {shape.task:22} {str(shape.d):>4} {shape.layers:>6}  "
                     f"{measured:>8}  {_size(shape)}")
    trial_epochs = sum(left.values())
    skipped = sum(n * s.epochs for s, n in shapes.items()) - trial_epochs
    if skipped:
        n_resumed = sum(1 for key, _ in todo if key in resumed and resumed[key].epoch)
        lines.append(f"  {n_resumed} trial{'s' if n_resumed != 1 else ''} resume{'' if n_resumed != 1 else 's'} "
                     f"from a checkpoint (marked above): the {skipped} epoch{'s' if skipped != 1 else ''} "
                     f"already trained {'are' if skipped != 1 else 'is'} not counted below.")
    k, why = parallelism(spec)
    if k == 0:
        lines.append(f"  total: {trial_epochs} trial-epochs; no trial can start here ({why}): `embinit run` on this "
                     "machine stops at once; run it where the GPUs are (a GPU machine, or a cluster with --address)")
        return lines
    longest = max(s.epochs for s in shapes)
    rounds = math.ceil(sum(shapes.values()) / k)
    lines.append(f"  total: {trial_epochs} trial-epochs; {k} trials at a time here ({why}): about {rounds} "
                 f"round{'s' if rounds != 1 else ''} of up to {longest} epoch{'s' if longest != 1 else ''} each.")
    if all(v is not None for v in per_epoch.values()):
        busy = sum(left[s] * per_epoch[s] for s in shapes)
        lines.append(f"  estimate from the trials of this shape already in the store (s/epoch, median): "
                     f"{busy / 60:.1f} trial-minutes, about {busy / k / 60:.1f} min of wall-clock at {k} at a time.")
        if scaled:
            lines.append("  s/epoch '~': measured at another batch_size and scaled by the number of steps per epoch "
                         "(equal seconds per step: an upper bound for a smaller batch on CPU).")
    else:
        lines.append("  s/epoch '?': no finished trial of that shape in the store yet; the sweep's progress "
                     "line gives an ETA once the first epoch has finished.")
    return lines


def _seconds(s: float) -> str:
    """Seconds to two significant figures below 10 (a small model's epoch takes 0.42 s, not "0"), whole above."""
    return f"{s:.2g}" if s < 10 else f"{s:.0f}"


def execution_lines(spec, plan) -> list[str]:
    """How a grid's trials would be grouped into fused models (`execution.fuse`), at this machine's
    parallelism (a cluster's slots may differ: the sweep groups for the slots it finds)."""
    ex = spec.execution
    if ex.fuse == "off":
        return []
    if not ex.fuses(spec.resources.gpus):
        return ["", "execution: fuse auto: the trials run on CPU (resources.gpus: 0), where fusing at best breaks "
                    "even; they run separately (fuse: always fuses them)"]
    from embinit.sweep.fused import fused_units
    from embinit.sweep.work import units_to_run
    k, why = parallelism(spec)
    if k == 0:
        return []   # cost_lines says why nothing can start here
    units = fused_units(units_to_run(spec, set(), plan)[0], ex, k)
    groups = sorted((len(u.trials) for u in units if u.fused), reverse=True)
    alone = sum(len(u.trials) for u in units if not u.fused)
    sizes = ", ".join(map(str, groups[:12])) + (", ..." if len(groups) > 12 else "")
    return ["", f"execution: fuse {ex.fuse} at {k} trials at a time ({why}): {len(groups)} fused group"
                f"{'s' if len(groups) != 1 else ''} ({sizes or '-'}), {alone} trial{'s' if alone != 1 else ''} "
                f"alone; a cluster's slots may group them otherwise"]


def not_reused_lines(spec, plan, recs: list) -> list[str]:
    """The experiment's finished trials (of `recs`) the plan does not reuse, and why (a spec edited since:
    embinit.sweep.not_reused); [] when none."""
    from embinit.sweep.not_reused import notice_lines
    notice = notice_lines(spec.experiment_name(), plan, recs)
    return [""] + notice if notice else []


def _checkpoints(spec, exp_id: str | None, uri: str | None):
    """This node's folder of the experiment's trial checkpoints, where the run looks for those it resumes;
    None with the operator's object store (the run fetches the store's copy) or no experiment yet."""
    from embinit.storage import STORAGE_ENV
    from embinit.sweep.trial_folders import experiment_folder
    if exp_id is None or uri is None or os.environ.get(STORAGE_ENV, "").strip():
        return None
    return experiment_folder(spec.cache_dir, uri, exp_id)


def dry_run(spec, tracking_uri: str | None = None, prune_command: str = "embinit run SPEC --prune-checkpoints") -> str:
    """The expanded trial list, one trial a line, the cost, and the total; `tracking_uri` (the run's
    `--tracking-uri`) is the store the run would write, else the spec's. `prune_command`: the command that
    removes the checkpoint folders of trials the spec no longer plans, named where there are any."""
    uri = resolved(spec.tracking_uri(tracking_uri))
    # before anything is read: a file the run would refuse is an error here too; a server is read through
    store = local_store(uri) or server_store(uri)
    read = readable_store(uri, store)
    plan = spec.plan()   # once: planning a large grid hashes every trial's key
    exp_id, recs = experiment_trials(spec, read) if not spec.drawn else (None, [])   # the store read once
    done = finished_here(plan, recs)
    resumed = resumes(plan, exp_id, read, recs, done, _checkpoints(spec, exp_id, read))
    lines = trial_lines(spec, plan, done, resumed)
    if not spec.drawn:
        lines += cost_lines(spec, plan, read, done, {exp_id: recs} if exp_id else None, resumed)
        lines += execution_lines(spec, plan)
        lines += not_reused_lines(spec, plan, recs)
        lines += retired_lines(retired_folders(spec, plan, exp_id, read, recs), spec.name, prune_command)
    notes = hub_notes(plan) + own_tokenizer_lines(plan)
    lines += ([""] + notes if notes else []) + store_lines(store)
    n = spec.num_trials()
    lines.append(f"{n} trial{'' if n == 1 else 's'}; MLflow experiment {spec.experiment_name()!r} at {masked(uri)}")
    return "\n".join(lines)
