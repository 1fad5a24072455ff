"""K-nearest-neighbour snapshots: what a `SimilarityCallback` with a `snapshot_dir` writes at each
measured step (`knn_step00000500.pt`: the N x K int32 neighbour lists, ~2 MB at 50k tokens instead of a
100 MB table, with K, the neighbour metric and the vocabulary's fingerprint), what another run given that
folder as `reference_snapshots` reads back at the same step, and `similarity_curve(dir_a, dir_b)`: the
whole curve recomputed afterwards from two folders, whatever order the runs ran in.

When its trial ends (finished, stopped early or diverged) the writer marks the series' end (`knn_end.json`:
the last step and the trial's status, `mark_end`): a reader waiting for a step the series will never have
(a reference seed that diverged or stopped early) skips it at once instead of waiting its `wait_s`."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

from embinit.analysis.similarity import per_token_scores, summarize
from embinit.errors import EmbinitError
from embinit.trusted import check_writable


def fingerprint(tokens: list[str] | None) -> str | None:
    return hashlib.sha256("\n".join(tokens).encode()).hexdigest()[:16] if tokens else None


def snapshot_path(folder: str | Path, step: int) -> Path:
    return Path(folder) / f"knn_step{step:08d}.pt"


END_FILE = "knn_end.json"   # not a `knn_step*.pt`: the readers' globs never take it for a snapshot


def mark_end(folder: Path, step: int, status: str | None) -> None:
    """Say that the series in `folder` ends at `step`: nothing more will be written there."""
    folder = check_writable(folder, "the KNN snapshot folder")
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (END_FILE + ".tmp")
    tmp.write_text(json.dumps({"step": step, "status": status}))
    os.replace(tmp, folder / END_FILE)


def clear_end(folder: Path) -> None:
    """A trial (re)starting its series: an earlier attempt's end no longer holds."""
    (check_writable(folder, "the KNN snapshot folder") / END_FILE).unlink(missing_ok=True)


def series_ended(folder: Path) -> bool:
    """Whether the writer of `folder` has ended its series (a snapshot missing now never comes)."""
    return (Path(folder) / END_FILE).exists()


def save_snapshot(folder: Path, step: int, idx: torch.Tensor, k: int, neighbours: str,
                  tokens: list[str] | None) -> Path:
    """Write `idx` (the top-k neighbour lists at `step`) into `folder`, checked as it is used."""
    folder = check_writable(folder, "the KNN snapshot folder")  # resolved as it is used
    folder.mkdir(parents=True, exist_ok=True)
    path = snapshot_path(folder, step)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({"step": step, "k": k, "neighbours": neighbours, "indices": idx.int(),
                "fingerprint": fingerprint(tokens)}, tmp)
    os.replace(tmp, path)   # a concurrent reader never sees a half-written file
    return path


class OtherSettings(EmbinitError):
    """A snapshot measured with other settings than asked: fewer neighbours (K) or another neighbour
    measure (a spec whose `analyses.similarity` changed since the reference trial wrote it)."""


def load_snapshot(path: Path, k: int, neighbours: str, fp: str | None = None) -> torch.Tensor:
    snap = torch.load(path, map_location="cpu", weights_only=True)
    if snap["neighbours"] != neighbours or snap["k"] < k:
        raise OtherSettings(f"{path} holds K={snap['k']} {snap['neighbours']} neighbours; "
                            f"K={k} {neighbours} was asked")
    if fp is not None and snap.get("fingerprint") not in (None, fp):
        raise EmbinitError(f"{path} was written for another vocabulary (fingerprint "
                           f"{snap['fingerprint']} vs {fp})")
    return snap["indices"][:, :k].long()   # the first k of K sorted neighbours are the top k


def similarity_curve(dir_a: str | Path, dir_b: str | Path, k: int = 10, metric: str = "jaccard",
                     neighbours: str = "dot") -> list[dict]:
    """[{step, mean, median}] for every step both snapshot folders have, in step order."""
    steps_a = {int(p.stem[8:]) for p in Path(dir_a).glob("knn_step*.pt")}
    steps_b = {int(p.stem[8:]) for p in Path(dir_b).glob("knn_step*.pt")}
    curve = []
    for step in sorted(steps_a & steps_b):
        ia = load_snapshot(snapshot_path(dir_a, step), k, neighbours)
        ib = load_snapshot(snapshot_path(dir_b, step), k, neighbours)
        scores, inter = per_token_scores(ia, ib, metric)
        s = summarize(scores, inter, k, torch.ones(len(scores), dtype=torch.bool))
        curve.append({"step": step, "mean": s["mean"], "median": s["median"]})
    return curve
