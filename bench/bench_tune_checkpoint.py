"""Benchmark: what an epoch's `tune.report` costs a trial when it carries the trial's checkpoint folder
(Tune copies it into its storage; what every embinit trial did at every epoch end before 2026-11-27)
against a report without one (what a trial on one machine, or with the object store, does now:
embinit.sweep.resume, `tune_checkpoint`).

The folder is real: the trainer's own writers (`embinit.train.checkpoint.save_last` / `save_best`, and the
init sample) on the translation model at Multi30k de->en's vocabularies (7,853 / 5,898 words), 3+3 layers,
feed-forward 512, after one Adam step (so `last.pt` holds Adam's moments), at each D (heads: D/10, 5 at
D=50). The Tune run is real too: a local Ray on the loopback (as `embinit run` starts it), `reuse_actors`,
`CheckpointConfig(num_to_keep=1)` as in `tune_run.run_config`, one trial at a time. Trials alternate
between the two modes, `--rounds` of each per D; each trial reports `--epochs` times and before each
report rewrites `last.pt`, `last.json` and `best.pt` as the trainer does at an epoch end (not timed).
Timed in the worker: `resume.staged` + `tune.report(..., checkpoint=...)` against `tune.report(...)`
(the report returns once the driver has taken the result; Tune copies the checkpoint before that). Bytes:
the folder's size, and the worker process's bytes written during the report (`wchar` of /proc/self/io).

Usage: python bench/bench_tune_checkpoint.py [--dims 50 300] [--epochs 5] [--rounds 3]
Writes bench/results/tune_checkpoint.json (with lscpu's model and the load) and prints a markdown row per D.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from machine import cpu_model  # noqa: E402  (bench/machine.py)

SRC_VOCAB, TGT_VOCAB = 7853, 5898   # Multi30k de / en, min freq 2 (bench_trainer.py)
KEY = "0" * 64                       # a trial key's shape


def build_template(d: int, folder: Path) -> int:
    """A trial folder as the trainer leaves it after an epoch, at dimension `d`; returns its bytes."""
    import torch

    from embinit.models import ModelConfig, build_model, set_dropout_generator
    from embinit.sweep.reporting import _save_init_sample
    from embinit.sweep.resume import RUN_ID_FILE
    from embinit.train import checkpoint as ckpt
    from embinit.train.lifecycle import make_optimizer
    g = torch.Generator().manual_seed(0)
    model = build_model("translation", {"src": torch.randn(SRC_VOCAB, d, generator=g) * 0.05,
                                        "tgt": torch.randn(TGT_VOCAB, d, generator=g) * 0.05},
                        ModelConfig(d_model=d, heads=max(1, d // 10), layers=3, ff_dim=512), generator=g)
    dropout = torch.Generator().manual_seed(1)
    set_dropout_generator(model, dropout)
    opt = make_optimizer(list(model.parameters()), 2e-4)
    sum(p.square().sum() for p in model.parameters()).backward()
    opt.step()  # Adam's two moments per parameter, as in every last.pt after the first step
    folder.mkdir(parents=True)
    _save_init_sample(model, folder / "init_embedding_sample.npz")
    history = [{"epoch": e, "train/loss": 3.0, "val/loss": 2.9, "val/bleu": 10.0} for e in range(1, 21)]
    ckpt.save_last(folder, KEY, model, opt, dropout, {"epoch": 1, "step": 454, "history": history, "best": {},
                                                      "stopped": False, "emb_stats_init": {}, "elapsed": 1.0})
    ckpt.save_best(folder, model, {"d_model": d}, {"src": [f"w{i}" for i in range(SRC_VOCAB)],
                                                   "tgt": [f"w{i}" for i in range(TGT_VOCAB)]}, 1)
    (folder / RUN_ID_FILE).write_text("f" * 32)
    return sum(p.stat().st_size for p in folder.iterdir())


def wchar() -> int:
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


def trainable(config: dict, template: str, work: str, epochs: int) -> None:
    """One bench trial: `epochs` epoch ends of a trial in its claimed folder, each reported to Tune."""
    from ray import tune
    from ray.tune import Checkpoint

    from embinit.sweep import resume
    config, template, work = config["cfg"], Path(template), Path(work)
    claim = resume.Claim(KEY, work / f"{config['mode']}-{config['i']}" / KEY, persistent=True)
    claim.path.mkdir(parents=True)
    times, written = [], []
    try:
        for epoch in range(1, epochs + 1):
            for f in template.iterdir():  # the trainer's epoch end: each file written anew, then renamed
                shutil.copyfile(f, claim.path / (f.name + ".tmp"))
                os.replace(claim.path / (f.name + ".tmp"), claim.path / f.name)
            metrics = {"embinit_epoch": epoch, "objective": 1.0 / epoch}
            w0, t0 = wchar(), time.perf_counter()
            if config["mode"] == "with":
                with resume.staged([claim]) as folder:
                    tune.report(metrics, checkpoint=Checkpoint.from_directory(folder))
            else:
                tune.report(metrics)
            times.append(time.perf_counter() - t0)
            written.append(wchar() - w0)
    finally:
        shutil.rmtree(claim.path.parent, ignore_errors=True)
    (work / f"{config['mode']}-{config['i']}.json").write_text(json.dumps(
        {"times": times, "written": written}))


def run(d: int, epochs: int, rounds: int, base: Path) -> dict:
    from ray import tune
    template = base / f"template-{d}" / KEY
    size = build_template(d, template)
    work = base / f"work-{d}"
    work.mkdir()
    configs = [{"mode": m, "i": i, "d": d} for i in range(rounds) for m in ("with", "without")]
    fn = tune.with_resources(tune.with_parameters(trainable, template=str(template), work=str(work),
                                                  epochs=epochs), {"cpu": 1})
    tuner = tune.Tuner(fn, param_space={"cfg": tune.grid_search(configs)},
                       tune_config=tune.TuneConfig(max_concurrent_trials=1, reuse_actors=True),
                       run_config=tune.RunConfig(name=f"ckpt-{d}", storage_path=str(base / "ray_results"),
                                                 checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
                                                 verbose=0))
    tuner.fit()
    out = {"d": d, "folder_bytes": size, "files": {p.name: p.stat().st_size for p in template.iterdir()}}
    for mode in ("with", "without"):
        runs = [json.loads((work / f"{mode}-{i}.json").read_text()) for i in range(rounds)]
        times = [t for r in runs for t in r["times"]]
        written = [w for r in runs for w in r["written"]]
        out[mode] = {"median_ms": round(1e3 * statistics.median(times), 2),
                     "mean_ms": round(1e3 * statistics.mean(times), 2),
                     "max_ms": round(1e3 * max(times), 2), "reports": len(times),
                     "median_written_bytes": int(statistics.median(written))}
    out["extra_ms_per_report"] = round(out["with"]["median_ms"] - out["without"]["median_ms"], 2)
    out["ratio_median"] = round(out["with"]["median_ms"] / max(out["without"]["median_ms"], 1e-3), 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", type=int, nargs="+", default=[50, 300])
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where the folders and Tune's storage go (default: a temp dir)")
    ap.add_argument("--out", default=str(ROOT / "bench/results/tune_checkpoint.json"))
    args = ap.parse_args()
    import ray

    from embinit.sweep.ray_runtime import default_env, local_ray_options
    default_env()
    load_before = os.getloadavg()
    with local_ray_options() as local:
        ray.init(num_cpus=2, log_to_driver=False, **local)
    base = Path(tempfile.mkdtemp(prefix="bench-tune-ckpt-", dir=args.dir))
    rows = []
    try:
        print("| D | folder | report with checkpoint | without | extra per report | ratio | written with / without |")
        for d in args.dims:
            r = run(d, args.epochs, args.rounds, base)
            rows.append(r)
            print(f"| {d} | {r['folder_bytes'] / 1e6:.1f} MB | {r['with']['median_ms']} ms | "
                  f"{r['without']['median_ms']} ms | {r['extra_ms_per_report']} ms | {r['ratio_median']}x | "
                  f"{r['with']['median_written_bytes'] / 1e6:.1f} MB / "
                  f"{r['without']['median_written_bytes'] / 1e6:.3f} MB |", flush=True)
    finally:
        ray.shutdown()
        shutil.rmtree(base, ignore_errors=True)
    Path(args.out).write_text(json.dumps({
        "cpu": cpu_model(), "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M"),
        "epochs": args.epochs, "rounds": args.rounds, "load_before": load_before, "load_after": os.getloadavg(),
        "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
