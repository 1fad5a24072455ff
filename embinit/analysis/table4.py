"""The paper's Table-4 transformation chain: what scaling, standardization and position encodings do
to the word-analogy structure of a pretrained table. Steps apply left to right, named like its rows:

- `scale`: x · sqrt(D) (what the transformer's input layer does);
- `standardize`: Xavier standardization, eq. 1 -- `embinit.init.TRANSFORMS["standardize"]` itself, with
  the table's N x D for sigma_x (the init library's analytic Xavier std);
- `pe`: each row gets the sinusoidal encoding of one randomly chosen position added, positions drawn
  uniformly from [0, max_len) with a seeded generator (the paper's footnote 6);
- `pe_scaled`: the same, with the encodings multiplied by sigma_p / sigma_x (sigma_p: std of the chain's
  input, the pretrained table; sigma_x: Xavier std of an N x D table) -- the row
  "GloVe & (Pos. Enc. × σp/σx)".

Every chain with a `pe` or `pe_scaled` step also reports the ratio σ(words)/σ(PE) at that step: the std
of the table just before the encodings are added over the std of the encodings added (`chain_ratio`).
`ratio_sweep` isolates that ratio: the same rows rescaled to a grid of ratios, the same drawn positions
added, and the analogies counted at each (cosine analogies ignore a common scale, so only the ratio
changes). It is the evidence for when analogies survive the encodings.

max_len defaults to 5,000: the paper's Table 6 statistics of its position encodings (mean 0.131) are
those of a 5,000-row table at D=300 (`embinit.posenc.sinusoidal(5000, 300)` has mean 0.131).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import torch

from embinit.analysis.analogy import AnalogyResult, Questions, evaluate_analogies
from embinit.errors import EmbinitError, unknown_name
from embinit.posenc import sinusoidal

STEP_LABELS = {"scale": "Scaled", "standardize": "Xavier-Std.", "pe": "Pos. Enc.",
               "pe_scaled": "(Pos. Enc. × σp/σx)"}
STEPS = tuple(STEP_LABELS)
PAPER_MAX_LEN = 5000

# (steps, the paper's Table 4 value where it gives one: correct/total on its 5,893-word Multi30k table)
TABLE4_ROWS: list[tuple[tuple[str, ...], str | None]] = [
    ((), None),
    (("scale",), None),
    (("pe",), "1424/1631 (87.3)"),
    (("standardize",), None),
    (("standardize", "scale"), None),
    (("standardize", "pe"), "210/1631 (12.9)"),
    (("pe_scaled",), "181/1631 (11.1)"),
]
# Not a row of the paper: what the transformer actually adds (scaled rows + encodings), for comparison
# with "GloVe & Pos. Enc." (the paper's text explains that row by the scaled std, 6.39 vs 0.67).
# "Xavier-Std. & Scaled & Pos. Enc.": what the model adds for GloVe_Xavier; "Pos. Enc. & Xavier-Std.": the
# encodings added first, then the sum standardized (the ratio at the addition is the raw one).
EXTRA_ROWS: list[tuple[tuple[str, ...], str | None]] = [
    (("scale", "pe"), None), (("standardize", "scale", "pe"), None), (("pe", "standardize"), None)]
# σ(words)/σ(PE) grid of `ratio_sweep` (log-spaced around 1, where the two spreads are equal)
RATIO_GRID = (0.03, 0.1, 0.3, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0)


@dataclass
class ChainContext:
    n_total: int          # N of the table (sigma_x is the Xavier std of an N x D table)
    sigma_p: float        # std of the chain's input
    generator: torch.Generator
    max_len: int
    pe_base: float
    ratio: float | None = None   # σ(words)/σ(PE) at the chain's first encoding step


def parse_steps(spec: str | Sequence[str] | None) -> tuple[str, ...]:
    """'scale,standardize,pe' or a list -> validated step names ('' or None: no step)."""
    if spec is None:
        return ()
    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
    items = [s for s in items if s]
    for s in items:
        if s not in STEP_LABELS:
            raise unknown_name("analogy transform", s, STEPS)
    return tuple(items)


def chain_label(steps: Sequence[str], source: str = "GloVe") -> str:
    """The paper's row name, e.g. 'GloVe & Xavier-Std. & Pos. Enc.'."""
    return " & ".join([source] + [STEP_LABELS[s] for s in steps])


def _positions(ctx: ChainContext, n: int, dim: int) -> torch.Tensor:
    pos = torch.randint(0, ctx.max_len, (n,), generator=ctx.generator)
    return sinusoidal(ctx.max_len, dim, ctx.pe_base, dtype=torch.float64)[pos]


def _step(name: str, x: torch.Tensor, ctx: ChainContext) -> torch.Tensor:
    n, dim = x.shape
    if name == "scale":
        return x * math.sqrt(dim)
    if name == "standardize":
        from embinit.init import TRANSFORMS  # the init library's own, not a copy
        return TRANSFORMS["standardize"](x, ctx.n_total, dim, ctx.generator).rows
    if name in ("pe", "pe_scaled"):
        pe = _positions(ctx, n, dim)
        if name == "pe_scaled":
            from embinit.init import xavier_std
            pe = pe * (ctx.sigma_p / xavier_std(ctx.n_total, dim))
        if ctx.ratio is None:
            ctx.ratio = _std(x) / _std(pe)
        return x + pe
    raise unknown_name("analogy transform", name, STEPS)


def _std(x: torch.Tensor) -> float:
    return float(x.std()) if x.numel() > 1 else 0.0


def _context(x: torch.Tensor, seed: int, n_total: int | None, max_len: int, pe_base: float) -> ChainContext:
    if max_len < 1:
        raise EmbinitError(f"max_len must be positive, got {max_len}")
    return ChainContext(n_total or x.shape[0], _std(x), torch.Generator().manual_seed(int(seed)), int(max_len),
                        float(pe_base))


def chain_with_ratio(matrix: torch.Tensor, steps: Sequence[str], seed: int = 0, n_total: int | None = None,
                     max_len: int = PAPER_MAX_LEN, pe_base: float = 10000.0) -> tuple[torch.Tensor, float | None]:
    """(the transformed float32 table, σ(words)/σ(PE) at its first encoding step or None without one)."""
    steps = parse_steps(steps)
    x = matrix.double()
    ctx = _context(x, seed, n_total, max_len, pe_base)
    for s in steps:
        x = _step(s, x, ctx)
    return x.float(), ctx.ratio


def apply_chain(matrix: torch.Tensor, steps: Sequence[str], seed: int = 0, n_total: int | None = None,
                max_len: int = PAPER_MAX_LEN, pe_base: float = 10000.0) -> torch.Tensor:
    """The transformed float32 table. n_total: N for sigma_x (default: the matrix's rows)."""
    return chain_with_ratio(matrix, steps, seed, n_total, max_len, pe_base)[0]


def chain_ratio(matrix: torch.Tensor, steps: Sequence[str], seed: int = 0, n_total: int | None = None,
                max_len: int = PAPER_MAX_LEN, pe_base: float = 10000.0) -> float | None:
    """σ(words)/σ(PE) where the chain adds encodings (None when it adds none)."""
    return chain_with_ratio(matrix, steps, seed, n_total, max_len, pe_base)[1]


def ratio_sweep(matrix: torch.Tensor, tokens: Sequence[str], questions: Questions,
                ratios: Sequence[float] = RATIO_GRID, seed: int = 0, max_len: int = PAPER_MAX_LEN,
                pe_base: float = 10000.0, **evaluate_kw) -> list[dict]:
    """Analogy accuracy of `matrix · c + PE` with c chosen so that σ(words)/σ(PE) is each ratio; one draw
    of positions (from `seed`) for every ratio. Rows: {ratio, correct, total, accuracy}."""
    x = matrix.double()
    ctx = _context(x, seed, None, max_len, pe_base)
    pe = _positions(ctx, x.shape[0], x.shape[1])
    if not _std(x) > 0:
        raise EmbinitError("ratio_sweep needs a table with spread (its std is 0)")
    out = []
    for r in ratios:
        if not r > 0:
            raise EmbinitError(f"ratios must be positive, got {r}")
        table = (x * (r * _std(pe) / _std(x)) + pe).float()
        res = evaluate_analogies(table, tokens, questions, label=f"ratio {r:g}", **evaluate_kw).to_dict()
        out.append({"ratio": float(r), "correct": res["correct"], "total": res["total"],
                    "accuracy": res["accuracy"]})
    return out


def run_table4(matrix: torch.Tensor, tokens: Sequence[str], questions: Questions, source: str = "GloVe",
               rows=None, seed: int = 0, n_total: int | None = None, max_len: int = PAPER_MAX_LEN,
               pe_base: float = 10000.0, **evaluate_kw) -> list[tuple[str, str | None, AnalogyResult]]:
    """(row label, the paper's value or None, result) for each chain in `rows` (default: Table 4's)."""
    out = []
    for steps, paper in (rows or TABLE4_ROWS):
        table = apply_chain(matrix, steps, seed, n_total, max_len, pe_base)
        label = chain_label(steps, source)
        out.append((label, paper, evaluate_analogies(table, tokens, questions, label=label, **evaluate_kw)))
    return out
