"""Cut a word-vector text file (GloVe) to the lines of the words a set of text files can yield, in the
file's own order, so that it travels to the GPU machine (a device call carries 64 MiB; GloVe 6B 50d is
171 MB). The runs are unchanged: embinit's loaders keep only the rows of the task's vocabulary
(`embinit.init.vectors`), and the statistics of the standardized and matched inits come from those found
rows alone, so every row a run reads is kept.

    python tune_configs/gpu/cut_vectors.py glove.6B.50d.txt OUT.txt multi30k/train.en multi30k/val.en \\
        multi30k/test_2016_flickr.en analogy/questions-words.txt

A word is kept when it is a token of the texts under any of the tokenizations a run may use: spaCy's
English rules (spaCy is required), whitespace, and word/punctuation pieces, each as written and
lowercased. Prints how many lines it kept.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

PIECES = re.compile(r"\w+(?:'\w+)?|'\w+|n't|[^\w\s]")


def words_of(texts: list[Path]) -> set[str]:
    lines = [line for p in texts for line in p.read_text(encoding="utf-8").splitlines()]
    out: set[str] = set()
    for line in lines:
        out.update(line.split())
        out.update(PIECES.findall(line))
    try:
        import spacy
    except ImportError:   # the runs tokenize with spaCy: without its tokens, rows a run reads would be cut
        sys.exit("cut_vectors: needs spaCy (the runs tokenize with it); run it with the project's Python")
    for doc in spacy.blank("en").pipe(lines, batch_size=2000):
        out.update(t.text for t in doc)
    return out | {w.lower() for w in out}


def cut(source: Path, dest: Path, keep: set[str]) -> tuple[int, int]:
    kept = total = 0
    with source.open("rb") as f, dest.open("wb") as g:
        for line in f:
            total += 1
            word = line.split(b" ", 1)[0].decode("utf-8", "replace")
            if word in keep:
                g.write(line)
                kept += 1
    return kept, total


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path)
    ap.add_argument("dest", type=Path)
    ap.add_argument("texts", type=Path, nargs="+")
    args = ap.parse_args(argv)
    missing = [str(p) for p in [args.source, *args.texts] if not p.is_file()]
    if missing:
        sys.exit(f"cut_vectors: not a file: {', '.join(missing)}")
    if args.dest.resolve() == args.source.resolve():
        sys.exit("cut_vectors: the destination is the source")
    args.dest.parent.mkdir(parents=True, exist_ok=True)
    kept, total = cut(args.source, args.dest, words_of(args.texts))
    print(f"{args.dest}: {kept:,} of {total:,} lines")


if __name__ == "__main__":
    main()
