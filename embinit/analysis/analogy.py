"""Word analogies "a : b :: c : d" by 3CosAdd (Mikolov et al. 2013; the paper's Table 4).

The answer is the row nearest by cosine to b̂ − â + ĉ (unit-normalized rows, i.e. 3CosAdd of Levy &
Goldberg 2014, what gensim's `evaluate_word_analogies` computes), the three question words excluded.

Conventions (chosen to match gensim so the numbers can be compared):
- Questions file: word2vec's `questions-words.txt` format, `: section` headers and lines of four words.
  Sections whose name starts with `gram` are syntactic, the others semantic. Lines without exactly
  four words are skipped and counted as `invalid`.
- Case-insensitive lookup (default): words and tokens are compared by `str.upper()`; when several rows
  share a key (`Paris`, `paris`) the first row (the most frequent, in a frequency-ordered table) stands
  for the key, any of them counts as the answer, and all of them are excluded when the key is a
  question word.
- Only questions whose four words are all in the (restricted) vocabulary count (`total`); the others are
  `oov`. Accuracy = correct / total.
- Ties: among equal cosines the lower row wins. A question whose every candidate row belongs to one of
  its three words has no answer and is wrong (gensim predicts nothing for it either).
- Restriction: `restrict` keeps the first N rows (gensim's `restrict_vocab`), `vocab` keeps the rows
  whose token (by the lookup key) is in the given list; both restrict the questions and the candidates.

Blocked: 1024 questions x 8,192 candidate rows at a time, never a vocabulary x vocabulary matrix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import torch

from embinit.analysis.neighbours import unit_rows
from embinit.errors import EmbinitError
from embinit.text_files import utf8_error
from embinit.tracking.run_records import analogy_metrics

QUESTION_BLOCK = 1024
VOCAB_CHUNK = 8192    # 1024 x 8192 scores = 32 MB, reused for every chunk


@dataclass
class Questions:
    sections: list[tuple[str, list[tuple[str, str, str, str]]]]
    invalid: int = 0
    source: str = ""

    @property
    def count(self) -> int:
        return sum(len(q) for _, q in self.sections)


def parse_questions(lines: Iterable[str], source: str = "") -> Questions:
    sections: list = []
    invalid = 0
    for line in lines:
        line = line.strip()
        if not line:
            continue
        if line.startswith(":"):
            sections.append((line[1:].strip(), []))
            continue
        words = line.split()
        if len(words) != 4:
            invalid += 1
            continue
        if not sections:
            sections.append(("(no section)", []))
        sections[-1][1].append(tuple(words))
    return Questions([s for s in sections if s[1]], invalid, source)


def load_questions(path: str | Path) -> Questions:
    path = Path(path)
    if not path.is_file():
        raise EmbinitError(f"questions file not found: {path}")
    try:
        text = path.read_text(encoding="utf-8-sig")   # a byte-order mark is no part of the first line
    except OSError as e:
        raise EmbinitError(f"cannot read questions file {path}: {e}") from None
    except UnicodeDecodeError:   # each line that is not UTF-8, and how to re-encode it
        raise utf8_error(path, path.read_bytes()) from None
    qs = parse_questions(text.splitlines(), str(path))
    if qs.count == 0 or qs.invalid > qs.count:
        raise EmbinitError(f"{path}: {qs.invalid} lines are not four words and {qs.count} are; is it an analogy "
                           f"questions file (`: section` lines, then `a b c d` per line, as questions-words.txt)?")
    return qs


def is_syntactic(section: str) -> bool:
    return section.startswith("gram")


@dataclass
class AnalogyResult:
    correct: int
    total: int                      # questions with all four words in the vocabulary
    oov: int                        # questions skipped for an out-of-vocabulary word
    sections: dict[str, dict] = field(default_factory=dict)   # name -> {"correct", "total", "oov"}
    vocab_size: int = 0
    label: str = ""

    @staticmethod
    def _pct(c: int, t: int) -> float | None:
        return 100.0 * c / t if t else None

    @property
    def accuracy(self) -> float | None:
        return self._pct(self.correct, self.total)

    def group(self, syntactic: bool) -> tuple[int, int]:
        rows = [s for name, s in self.sections.items() if is_syntactic(name) == syntactic]
        return sum(s["correct"] for s in rows), sum(s["total"] for s in rows)

    def to_dict(self) -> dict:
        sem, syn = self.group(False), self.group(True)
        return {"label": self.label, "correct": self.correct, "total": self.total, "oov": self.oov,
                "accuracy": self.accuracy, "vocab_size": self.vocab_size,
                "semantic": {"correct": sem[0], "total": sem[1], "accuracy": self._pct(*sem)},
                "syntactic": {"correct": syn[0], "total": syn[1], "accuracy": self._pct(*syn)},
                "sections": {n: {**s, "accuracy": self._pct(s["correct"], s["total"])}
                             for n, s in self.sections.items()}}

    def to_metrics(self, prefix: str = "analogy") -> dict[str, float]:
        """Namespaced numbers for MLflow (percentages; a group without questions is left out)."""
        return analogy_metrics(self.to_dict(), prefix)   # the names an analogy run's record uses

    def summary_line(self) -> str:
        acc = self.accuracy
        return f"{self.correct}/{self.total} ({'n/a' if acc is None else f'{acc:.1f}'})"


def select_rows(matrix: torch.Tensor, tokens: Sequence[str], wanted: Sequence[str]):
    """The table of a task vocabulary, as the paper built Table 4's: rows for `wanted` in its order
    (exact token, else its lowercase), words the source lacks dropped. Returns (matrix, tokens,
    len(wanted)); the last is the table's N for sigma_x of the Xavier standardization."""
    index: dict[str, int] = {}
    for i, t in enumerate(tokens):
        index.setdefault(t, i)
    rows, names = [], []
    for w in wanted:
        i = index.get(w, index.get(w.lower()))
        if i is not None:
            rows.append(i)
            names.append(w)
    if not rows:
        raise EmbinitError(f"none of the {len(wanted)} vocabulary words is in the embeddings")
    return matrix[torch.tensor(rows)], names, len(wanted)


def _key(word: str, case_insensitive: bool) -> str:
    return word.upper() if case_insensitive else word


def _candidate_rows(tokens, restrict, vocab, case_insensitive) -> torch.Tensor:
    n = len(tokens) if restrict is None else min(restrict, len(tokens))
    if vocab is None:
        return torch.arange(n)
    wanted = {_key(w, case_insensitive) for w in vocab}
    return torch.tensor([i for i in range(n) if _key(tokens[i], case_insensitive) in wanted],
                        dtype=torch.long)


def evaluate_analogies(matrix: torch.Tensor, tokens: Sequence[str], questions: Questions,
                       restrict: int | None = None, vocab: Sequence[str] | None = None,
                       case_insensitive: bool = True, label: str = "") -> AnalogyResult:
    """3CosAdd accuracy of the rows of `matrix` (row i is `tokens[i]`) on `questions`."""
    if matrix.dim() != 2 or matrix.shape[0] != len(tokens):
        raise EmbinitError(f"{len(tokens)} tokens for an embedding matrix of shape {tuple(matrix.shape)}")
    if not torch.isfinite(matrix).all():
        raise EmbinitError("the embedding matrix contains NaN or infinite values")
    rows = _candidate_rows(tokens, restrict, vocab, case_insensitive)
    if len(rows) == 0:
        raise EmbinitError("the vocabulary restriction leaves no words")
    w = matrix[rows]
    # unit rows in the matrix's own precision, then float32: a float32 norm of a row beyond ~1e19 is inf
    # (the row became 0 and scored 0 with every query), of a row below ~1e-19 is 0
    w = unit_rows(w if w.dtype in (torch.float32, torch.float64) else w.float()).float()
    keys = [_key(tokens[i], case_insensitive) for i in rows.tolist()]
    first: dict[str, int] = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)                 # the first (most frequent) row stands for the key
    group = torch.tensor([first[k] for k in keys], dtype=torch.long)
    result = AnalogyResult(0, 0, 0, vocab_size=len(rows), label=label)
    for name, qs in questions.sections:
        ids = [[first.get(_key(x, case_insensitive)) for x in q] for q in qs]
        ok = [q for q in ids if None not in q]
        correct = _count_correct(w, group, torch.tensor(ok, dtype=torch.long).view(-1, 4))
        sec = result.sections.setdefault(name, {"correct": 0, "total": 0, "oov": 0})
        sec["correct"] += correct
        sec["total"] += len(ok)
        sec["oov"] += len(qs) - len(ok)
    result.correct = sum(s["correct"] for s in result.sections.values())
    result.total = sum(s["total"] for s in result.sections.values())
    result.oov = sum(s["oov"] for s in result.sections.values())
    return result


def _count_correct(w: torch.Tensor, group: torch.Tensor, q: torch.Tensor) -> int:
    """Number of questions (rows of key ids a, b, c, d) whose 3CosAdd answer has d's key."""
    if len(q) == 0:
        return 0
    # every row sharing a key with a question word is excluded (`Paris` with `paris`), by the same
    # vocabulary-chunked search as unique keys: a [questions x V] block is 9 GB at GloVe 840B's 2.2M rows
    members = _key_members(group)
    wt = w.T.contiguous()   # [D, V]: column slices of it multiply ~25% faster than w[c0:c1].T (measured)
    correct = 0
    with torch.no_grad():
        for s in range(0, len(q), QUESTION_BLOCK):
            qb = q[s:s + QUESTION_BLOCK]
            query = w[qb[:, 1]] - w[qb[:, 0]] + w[qb[:, 2]]
            pred = _argmax_excluding(query, wt, members[qb[:, :3]].flatten(1))
            # -1: every row is a question word's, nothing answers (gensim predicts nothing either)
            correct += int(((pred >= 0) & (group[pred.clamp_min(0)] == qb[:, 3])).sum())
    return correct


def _key_members(group: torch.Tensor) -> torch.Tensor:
    """[V, m] long: row k lists the rows whose key id is k (padded with -1; m = the most rows of a key)."""
    order = torch.argsort(group, stable=True)
    keys = group[order]
    rank = torch.arange(len(keys)) - torch.searchsorted(keys, keys)   # position within its key's run
    members = torch.full((len(group), int(rank.max()) + 1), -1, dtype=torch.long)
    members[keys, rank] = order
    return members


def _argmax_excluding(query: torch.Tensor, wt: torch.Tensor, excluded: torch.Tensor) -> torch.Tensor:
    """Best row per query, excluded rows masked (entries -1: none), -1 where every row is excluded; the
    lower row wins ties. Vocabulary chunks go through one reused buffer (fresh 100 MB score blocks cost
    more in page faults than in arithmetic)."""
    b = len(query)
    buf = torch.empty(b, VOCAB_CHUNK, dtype=query.dtype)
    best_v = torch.full((b,), float("-inf"), dtype=query.dtype)
    best_i = torch.full((b,), -1, dtype=torch.long)
    rows = torch.arange(b)
    for c0 in range(0, wt.shape[1], VOCAB_CHUNK):
        c1 = min(c0 + VOCAB_CHUNK, wt.shape[1])
        s = buf.view(-1)[: b * (c1 - c0)].view(b, c1 - c0)   # contiguous, so mm writes in place
        torch.mm(query, wt[:, c0:c1], out=s)
        inside = (excluded >= c0) & (excluded < c1)
        r, c = rows.unsqueeze(1).expand_as(excluded)[inside], excluded[inside] - c0
        s[r, c] = float("-inf")
        v, i = s.max(dim=1)              # first maximum within the chunk
        better = v > best_v              # strict: an earlier chunk keeps a tie
        best_v = torch.where(better, v, best_v)
        best_i = torch.where(better, i + c0, best_i)
    return torch.where(best_v > float("-inf"), best_i, -1)
