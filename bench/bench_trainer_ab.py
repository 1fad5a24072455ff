"""Side by side: the trainer step of an older embinit (a git revision) against this tree's, in ONE
process, alternating rounds and keeping each side's best (so load from other processes hurts neither
more), fp32 and bf16, Multi30k batches at D=300 (10 heads, 3+3 layers, ff 512, 64 pairs, 2 threads).

    python bench/bench_trainer_ab.py --rev f878ceb --data /path/to/multi30k [--steps 12 --rounds 4]

The old tree is exported with `git archive REV embinit` into a temporary folder and imported as the
package `embinit_old`. Each step reads its loss with `.item()`, as the CPU loop does. Writes
bench/results/trainer_ab.json.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import bench_trainer as bt  # noqa: E402


def export_old(rev: str, folder: Path) -> None:
    """`git archive REV embinit` -> folder/embinit_old, its imports renamed."""
    blob = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "embinit"], check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "embinit").rename(folder / "embinit_old")
    for path in (folder / "embinit_old").rglob("*.py"):
        text = path.read_text()
        path.write_text(re.sub(r"\b(from|import) embinit(\.|\b)", r"\1 embinit_old\2", text))
    sys.path.insert(0, str(folder))


def runner(pkg, prec, sv, tv, pairs, d, heads, steps):
    models = importlib.import_module(pkg + ".models")
    loop = importlib.import_module(pkg + ".train.loop")
    trn = importlib.import_module(pkg + ".train.translation")
    try:
        trial = importlib.import_module(pkg + ".train.lifecycle")
    except ModuleNotFoundError:   # an embinit older than the one trial lifecycle
        trial = importlib.import_module(pkg + ".train.trial")
    ac = loop.autocast_for(prec, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    m = models.build_model("translation", {"src": torch.randn(len(sv), d, generator=g) * .05,
                                           "tgt": torch.randn(len(tv), d, generator=g) * .05},
                           models.ModelConfig(d_model=d, heads=heads, layers=bt.LAYERS, ff_dim=bt.FF), generator=g)
    models.set_dropout_generator(m, torch.Generator().manual_seed(1))
    # the config fields the trainer reads (bench_trainer.translation_task's; this one may run older code)
    cfg = SimpleNamespace(task="multi30k", batch_size=bt.BATCH, max_tokens=None, beam_size=1,
                          extras={"val_bleu": False})
    data = SimpleNamespace(splits={"train": pairs}, eval_splits=["train"], vocab=tv, info={})
    task = trn.TranslationTask(data, cfg, torch.device("cpu"), ac)
    batches = task.train_batches(torch.Generator().manual_seed(0))[:steps + 2]
    opt = trial.make_optimizer(list(m.parameters()), 2e-4)

    def step(b):
        with ac():
            loss, _, n = task.batch_loss(m, b)
        loss.item()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return n

    for b in batches[:2]:
        step(b)

    def run():
        start = time.perf_counter()
        tokens = sum(step(b) for b in batches[2:])
        return tokens / (time.perf_counter() - start)
    return run


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", default="f878ceb")
    ap.add_argument("--data", default=os.environ.get("EMBINIT_BENCH_MULTI30K"))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--d", type=int, default=300)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "trainer_ab.json"))
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    tmp = Path(tempfile.mkdtemp(prefix="embinit-ab-"))
    export_old(args.rev, tmp)
    (train, val), source = bt.load_pairs(Path(args.data) if args.data else None)
    sv, tv, pairs, _ = bt.numericalize(train, val)
    heads = bt.HEADS.get(args.d, 8)
    runs = {(side, prec): runner(pkg, prec, sv, tv, pairs, args.d, heads, args.steps)
            for prec in ("fp32", "bf16") for side, pkg in (("old", "embinit_old"), ("new", "embinit"))}
    result = {"machine": bt.machine(2), "rev_old": args.rev, "data": source, "d": args.d, "steps": args.steps,
              "rounds": args.rounds, "load_before": os.getloadavg()}
    best = {k: 0.0 for k in runs}
    for r in range(args.rounds):
        for k, run in runs.items():
            best[k] = max(best[k], run())
        print(f"round {r + 1}: " + ", ".join(f"{s}/{p} {v:.0f}" for (s, p), v in best.items()), flush=True)
    t = {f"{s}/{p}": v for (s, p), v in best.items()}
    result.update(tokens_per_s=t, load_after=os.getloadavg(),
                  ratios={"new_vs_old_fp32": t["new/fp32"] / t["old/fp32"],
                          "new_vs_old_bf16": t["new/bf16"] / t["old/bf16"],
                          "bf16_vs_fp32_old": t["old/bf16"] / t["old/fp32"],
                          "bf16_vs_fp32_new": t["new/bf16"] / t["new/fp32"]})
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result["ratios"], indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
