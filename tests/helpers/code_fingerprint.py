"""What the current code computes for a few fixed tiny trials: the guard behind `config.CODE_VERSION`.

A trial key includes `CODE_VERSION`, and a key MLflow has finished is never trained again. So a change that
alters what a trial computes (a metric's definition, the model, the data order, an init) must bump it,
or old runs are reused and pooled with new ones under one version (BLEU's `<unk>` change, 01ce71b, did
not). `tests/test_code_version.py` recomputes this fingerprint and compares it with the one stored in
`tests/data/code_fingerprint.json` for the current version.

When it fails because a change was meant to alter the numbers: bump `CODE_VERSION` in embinit/config.py,
then rewrite the file with

    python -m tests.helpers.code_fingerprint --write

which refuses to overwrite the fingerprint of an unchanged version with different numbers.

Losses are compared to a relative 1e-3 (CPU models differ in their last bits, amplified by training);
scores that one flipped token changes (BLEU, accuracy of a tiny run) are recorded but compared loosely;
the BLEU pipeline itself is fingerprinted on fixed strings, exactly.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STORED = REPO / "tests" / "data" / "code_fingerprint.json"
VECTORS = REPO / "tune_configs" / "data" / "synthetic_vectors.txt"   # committed, GloVe-format, the quickstart's

# (relative, absolute) tolerance by the last part of a metric's name; anything else must match to 1e-9.
# BLEU and accuracy of a tiny run move by one flipped token or example; an init's mean is ~0.
TOLERANCE = {"loss": (1e-3, 1e-5), "ppl": (1e-3, 1e-5), "std": (1e-4, 0.0), "mean": (0.0, 1e-6),
             "bleu": (0.0, 2.0), "acc": (0.0, 0.05)}


def _trials() -> dict:
    from embinit.config import TrialConfig
    common = dict(seed=0, threads=1, device="cpu", precision="fp32")
    return {
        "translation": TrialConfig(task="synthetic_translation", init="glove+standardize", src_init="xavier",
                                   pretrained=str(VECTORS), epochs=3, lr=3e-3, extras={"noise": 0.4}, **common),
        "classification": TrialConfig(task="synthetic_classification", epochs=2, **common),
        "lm": TrialConfig(task="synthetic_lm", epochs=2, **common),
    }


def _bleu_on_fixed_strings() -> dict:
    """The BLEU pipeline (special tokens, `<unk>`, detokenization, sacrebleu, case) on fixed output."""
    from embinit.train.bleu import corpus_bleu, detokenize_all
    hyps = [["a", "man", "<unk>", "rides", "a", "horse", ".", "<eos>"], ["two", "dogs", "run", "<pad>"],
            ["The", "child", "sings", "."]]
    refs = ["A man rides a brown horse .", "Two dogs run in the park", "the child sings ."]
    out = {}
    for drop in (False, True):
        for lower in (False, True):
            score, _ = corpus_bleu(detokenize_all(hyps, " ".join, drop_unk=drop), refs, lowercase=lower)
            out[f"bleu_drop{int(drop)}_lc{int(lower)}"] = score
    return out


def compute() -> dict:
    """{name: {metric: value}} for every fixed trial, and the BLEU pipeline's scores."""
    from embinit.train.trial import run_trial
    out: dict[str, dict] = {"bleu_pipeline": _bleu_on_fixed_strings()}
    for name, cfg in _trials().items():
        r = run_trial(cfg, resume=False)
        values = {f"{k}@{h['epoch']}": v for h in r.history for k, v in h.items()
                  if k.startswith(("train/", "val/"))}
        values.update(r.test)
        values.update({f"init/{k}": v for k, v in r.emb_stats_init.items() if k in ("emb/std", "emb/mean")})
        values["best_epoch"] = r.best_epoch
        out[name] = values
    return out


def _close(metric: str, a: float, b: float) -> bool:
    last = metric.split("@")[0].rsplit("/", 1)[-1]
    rel, abs_ = next((tol for suffix, tol in TOLERANCE.items() if last == suffix or last.startswith(suffix + "_")),
                     (1e-9, 1e-12))
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def differences(stored: dict, now: dict) -> list[str]:
    """Every metric that differs beyond its tolerance, is missing, or is new."""
    out = []
    for group in sorted(set(stored) | set(now)):
        a, b = stored.get(group, {}), now.get(group, {})
        for metric in sorted(set(a) | set(b)):
            if metric not in a or metric not in b:
                out.append(f"{group}: {metric} {'is new' if metric not in a else 'is gone'}")
            elif a[metric] is None or b[metric] is None:
                if a[metric] != b[metric]:
                    out.append(f"{group}: {metric} was {a[metric]}, now {b[metric]}")
            elif not _close(metric, a[metric], b[metric]):
                out.append(f"{group}: {metric} was {a[metric]!r}, now {b[metric]!r}")
    return out


def main(argv=None) -> int:
    from embinit.config import CODE_VERSION
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help="store the fingerprint of the current CODE_VERSION")
    args = p.parse_args(argv)
    now = compute()
    stored = json.loads(STORED.read_text()) if STORED.exists() else None
    if not args.write:
        print(json.dumps(now, indent=1))
        return 0
    if stored and stored["code_version"] == CODE_VERSION and (diff := differences(stored["values"], now)):
        print(f"refused: CODE_VERSION is still {CODE_VERSION!r} and the numbers changed:\n  " + "\n  ".join(diff)
              + "\nbump CODE_VERSION in embinit/config.py first (old runs must not be reused).", file=sys.stderr)
        return 2
    STORED.write_text(json.dumps({"code_version": CODE_VERSION, "values": now}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {STORED.relative_to(REPO)} for CODE_VERSION {CODE_VERSION!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
