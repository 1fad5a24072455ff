"""Writes `synthetic_vectors.txt`: a small "pretrained" word-vector file in GloVe text format for the
quickstart, so it runs offline on a fresh machine (no GloVe download).

The vectors are random, NOT trained: every English word of embinit's synthetic translation task (plus
some words the task never uses, as in a real file) gets i.i.d. N(0.05, 0.7^2) values in D=32. That is a
GloVe-like scale (GloVe 6B 50d: std ~0.68, mean ~0.05) and ~4.5x the std of a Xavier table of the task's
size, so the file isolates the paper's *distribution* effect (Finding 1): no semantics to help.

    python tune_configs/data/make_synthetic_vectors.py   # rewrites the file (deterministic)
"""

from pathlib import Path

import numpy as np

from embinit.tasks.synthetic import LEXICON, NEGATIVE, NEUTRAL, POSITIVE

DIM, STD, MEAN, SEED = 32, 0.7, 0.05, 2407


def main() -> None:
    words = sorted(set(LEXICON.values()) | set(POSITIVE) | set(NEGATIVE) | set(NEUTRAL))
    rng = np.random.default_rng(SEED)
    table = rng.normal(MEAN, STD, size=(len(words), DIM))
    path = Path(__file__).with_name("synthetic_vectors.txt")
    with path.open("w") as f:
        for word, row in zip(words, table):
            f.write(word + " " + " ".join(f"{v:.5f}" for v in row) + "\n")
    print(f"wrote {path}: {len(words)} words x {DIM}")


if __name__ == "__main__":
    main()
