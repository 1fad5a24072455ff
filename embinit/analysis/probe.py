"""Position-encoding absorption probe (the paper's Finding 2).

The transformer's input is z = x_t · sqrt(D) + PE[p]. If the token rows are much wider than the
encodings (raw GloVe: std 6.4 after scaling vs 0.67), position information is "absorbed"; if the
encodings dominate, token identity suffers. For a table X (N x D) the probe samples (token, position)
pairs with a seeded generator, builds z, and measures both directions:

(a) position: a linear probe -- ridge least squares from [z, 1] to PE[p], fit on samples of *training
    tokens* and scored on samples of held-out tokens (so it cannot memorize rows) -- reports R² of the
    predicted encodings and the accuracy of decoding the position as the nearest encoding row
    (`probe/pos_acc`, chance 1/max_len) and its mean absolute error in positions;
(b) token: the token is recovered as the nearest row of X · sqrt(D) by cosine (`probe/token_acc`,
    chance 1/N; ties: lower row).

Plus the scales side by side (from `embinit.stats.embedding_stats` over the probed positions): std of
X · sqrt(D), std of the encodings, and `absorption` = their ratio (far above 1: position drowned).
`probe_table` works on any table (an init before training, `probe_init`), `probe_checkpoint` on a
trained `best.pt` (its pe_base comes from the checkpoint's config when present; the positions probed
are `max_len`, default 64, not the config's `max_len`, which caps tokens per sentence).
"""

from __future__ import annotations

import math

import torch

from embinit.errors import EmbinitError
from embinit.posenc import sinusoidal

DEFAULT_MAX_LEN = 64     # positions probed: sentence lengths of the paper's tasks are well below 64


def _check(table: torch.Tensor, max_len: int, n_samples: int, test_frac: float) -> None:
    if table.dim() != 2 or table.shape[0] < 2:
        raise EmbinitError(f"the probe needs a table of at least 2 rows, got shape {tuple(table.shape)}")
    if not torch.isfinite(table).all():
        raise EmbinitError("the table contains NaN or infinite values")
    if max_len < 2:
        raise EmbinitError(f"max_len must be at least 2 positions, got {max_len}")
    if n_samples < 10:
        raise EmbinitError(f"n_samples must be at least 10, got {n_samples}")
    if not 0.0 < test_frac < 1.0:
        raise EmbinitError(f"test_frac must be in (0, 1), got {test_frac}")


def _sample(rows: torch.Tensor, n: int, max_len: int, g: torch.Generator):
    tok = rows[torch.randint(0, len(rows), (n,), generator=g)]
    pos = torch.randint(0, max_len, (n,), generator=g)
    return tok, pos


def _ridge(z: torch.Tensor, y: torch.Tensor, lam: float) -> torch.Tensor:
    """W minimizing |[z 1] W - y|^2 + lam |W|^2 (bias not penalized), in float64."""
    a = torch.cat([z, torch.ones(len(z), 1, dtype=z.dtype, device=z.device)], dim=1)
    reg = lam * torch.eye(a.shape[1], dtype=z.dtype, device=z.device)
    reg[-1, -1] = 0.0
    return torch.linalg.solve(a.T @ a + reg, a.T @ y)


def _unit(x: torch.Tensor) -> torch.Tensor:
    x = x.double()
    return x / x.norm(dim=1, keepdim=True).clamp_min(1e-300)


def _nearest(queries: torch.Tensor, keys: torch.Tensor, cosine: bool, block: int = 2048) -> torch.Tensor:
    """Index of the nearest key per query (cosine, or Euclidean when cosine=False); first wins ties. For
    cosine both sides are made unit length in float64 first (a float32 norm of rows beyond ~1e19 is inf,
    which made every key 0 and every answer the first row), then compared in float32."""
    if cosine:
        keys, queries = _unit(keys).float(), _unit(queries).float()
    out = torch.empty(len(queries), dtype=torch.long, device=queries.device)
    sq = (keys * keys).sum(1)
    for s in range(0, len(queries), block):
        q = queries[s:s + block]
        scores = q @ keys.T if cosine else 2 * q @ keys.T - sq   # -|q-k|^2 + |q|^2
        out[s:s + block] = scores.argmax(dim=1)
    return out


def probe_table(table: torch.Tensor, max_len: int = DEFAULT_MAX_LEN, n_samples: int = 20000,
                seed: int = 0, pe_base: float = 10000.0, test_frac: float = 0.25, ridge: float = 1e-3,
                prefix: str = "probe") -> dict[str, float]:
    """Namespaced probe metrics for table X (see the module docstring), computed on the table's device
    (the samples are drawn on the CPU from `seed`, so every device probes the same rows)."""
    _check(table, max_len, n_samples, test_frac)
    dev = table.device
    x = table.detach().double()
    n, dim = x.shape
    scaled = x * math.sqrt(dim)
    pe = sinusoidal(max_len, dim, pe_base, dtype=torch.float64).to(dev)
    g = torch.Generator().manual_seed(int(seed))
    perm = torch.randperm(n, generator=g)
    n_test_rows = min(n - 1, max(1, round(n * test_frac)))
    test_rows, train_rows = perm[:n_test_rows], perm[n_test_rows:]
    n_test = max(1, round(n_samples * test_frac))
    tr_tok, tr_pos = _sample(train_rows, n_samples - n_test, max_len, g)
    te_tok, te_pos = _sample(test_rows, n_test, max_len, g)
    tr_tok, tr_pos, te_tok, te_pos = (t.to(dev) for t in (tr_tok, tr_pos, te_tok, te_pos))
    z_tr, z_te = scaled[tr_tok] + pe[tr_pos], scaled[te_tok] + pe[te_pos]
    w = _ridge(z_tr, pe[tr_pos], ridge)
    pred = torch.cat([z_te, torch.ones(len(z_te), 1, dtype=z_te.dtype, device=dev)], dim=1) @ w
    target = pe[te_pos]
    r2 = 1.0 - float(((pred - target) ** 2).sum() / ((target - target.mean(0)) ** 2).sum())
    pos_hat = _nearest(pred.float(), pe.float(), cosine=False)
    z_all = torch.cat([z_tr, z_te])   # float64: rows of a huge table stay finite until made unit length
    tok_all = torch.cat([tr_tok, te_tok])
    tok_hat = _nearest(z_all, scaled, cosine=True)
    # the scales side by side, from the one implementation of the statistics (embinit.stats)
    from embinit.stats import embedding_stats
    st = embedding_stats(table.detach().float().cpu(), pe_length=max_len, pe_base=pe_base, prefix="")
    return {f"{prefix}/pos_acc": float((pos_hat == te_pos).double().mean()),
            f"{prefix}/pos_r2": r2,
            f"{prefix}/pos_mae": float((pos_hat - te_pos).abs().double().mean()),
            f"{prefix}/pos_chance": 1.0 / max_len,
            f"{prefix}/token_acc": float((tok_hat == tok_all).double().mean()),
            f"{prefix}/token_chance": 1.0 / n,
            f"{prefix}/emb_scaled_std": st["scaled_std"],
            f"{prefix}/pe_std": st["pe_std"],
            f"{prefix}/absorption": st["absorption"]}


def probe_checkpoint(path, key: str | None = None, max_len: int | None = None, **kw) -> dict[str, float]:
    """The probe on a trained checkpoint's table (`key`: tok, tgt or src; default as in sources)."""
    from embinit.analysis.sources import load_checkpoint

    emb = load_checkpoint(path, key)
    cfg = emb.config or {}
    kw.setdefault("pe_base", float(cfg.get("pe_base") or 10000.0))
    return probe_table(emb.matrix, max_len=max_len or DEFAULT_MAX_LEN, **kw)


def probe_init(init, vocab, dim: int | None = None, pretrained: str | None = None, seed: int = 0,
               **kw) -> dict[str, float]:
    """The probe on a freshly built init table (embinit.init.build_table), before any training. The table
    is built against the probe's own PE table (`max_len` positions, `pe_base`), the one `probe/absorption`
    is measured on, so a `rescale=absorption:R` init probes at absorption R."""
    from embinit.init import build_table
    from embinit.stats import PETable

    pe = PETable(kw.get("max_len", DEFAULT_MAX_LEN), kw.get("pe_base", 10000.0))
    res = build_table(init, vocab, dim=dim, pretrained=pretrained, seed=seed, pe=pe)
    return probe_table(res.table, seed=seed, **kw)
