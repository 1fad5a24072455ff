"""A trial that diverges with the analyses on (embinit.analysis.callbacks.ANALYSES) is recorded as the
trainer records any diverged trial: status "diverged" at its step. Its table can hold NaN before the
trainer reads the bad loss (a finite loss with NaN gradients is read one step late on any device; an
accelerator reads every `sync_interval` steps, a fused group once a window), and an analysis skips such a
table (`skipped_steps`) rather than fail the trial -- and, in a fused group, its healthy group-mates --
with an error about its own input ("embeddings contains NaN or infinite values"). Nothing non-finite is
logged, and no K-NN snapshot is written for a skipped step."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

from embinit.analysis.callbacks import ANALYSES, make_callbacks
from embinit.spec.models import Analyses
from test_analysis_contract import EXAMPLES, TINY

torch.set_num_threads(1)
# Rows of 1e18 (x sqrt(16) in the model): step 1's loss is finite but its gradients are not, so Adam's
# update makes the table NaN and step 2's loss is NaN. TINY has 2 steps an epoch: it diverges at step 2,
# in epoch 1, with step 1's table NaN.
BLOWS_UP = dataclasses.replace(TINY, init="xavier+rescale=1e18")


def every_step(name: str, tmp_path) -> dict:
    """The contract's example settings of `name`, the similarity measured at every step."""
    settings = EXAMPLES[name](tmp_path)
    return {**settings, "every_n_steps": 1} if name == "similarity" else settings


def analysed(settings: dict, cfg, out_dir):
    """The trial's callbacks for `settings` and the (step, metrics) points they log."""
    logged: list[tuple[int, dict]] = []
    callbacks = make_callbacks(Analyses.model_validate(settings),
                               log_fn=lambda metrics, step: logged.append((step, dict(metrics))),
                               out_dir=out_dir, cfg=cfg)
    return callbacks, logged


def all_finite(logged) -> bool:
    return all(isinstance(v, float) and math.isfinite(v) for _, metrics in logged for v in metrics.values())


@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_a_diverging_trial_is_recorded_diverged_and_its_analysis_skips_the_nan_table(name, tmp_path):
    from embinit.train import run_trial
    settings = {name: every_step(name, tmp_path)}
    callbacks, logged = analysed(settings, BLOWS_UP, tmp_path / "run")
    result = run_trial(BLOWS_UP, out_dir=tmp_path / "run", callbacks=callbacks, resume=False, cache_dir=False)
    assert (result.status, result.diverged_step, result.test) == ("diverged", 2, {})
    (cb,) = callbacks
    assert cb.skipped_steps == [1]                  # step 1's table is NaN: not measured, not logged
    assert [step for step, _ in logged] == [0] and all_finite(logged)   # the init's point stands
    assert [h["step"] for h in cb.history] == [0]
    if name == "similarity":
        assert sorted(p.name for p in cb.snapshot_dir.glob("knn_step*")) == ["knn_step00000000.pt"]
        end = json.loads((cb.snapshot_dir / "knn_end.json").read_text())   # the series ends with the trial
        assert end == {"step": 1, "status": "diverged"}
    # the trainer's own embedding statistics: the init's (finite), none of a best epoch
    assert math.isfinite(result.emb_stats_init["emb/std"]) and result.emb_stats_best == {}


def test_the_trial_without_analyses_diverges_at_the_same_step(tmp_path):
    """What the analyses must not change: the trainer's own record of the divergence."""
    from embinit.train import run_trial
    result = run_trial(BLOWS_UP, resume=False, cache_dir=False)
    assert (result.status, result.diverged_step) == ("diverged", 2)


def test_a_member_diverging_in_a_read_window_spares_its_fused_group(tmp_path):
    """A fused group read every 4 steps (an accelerator's window): the diverging member's table is NaN at
    steps 1 and 2 before the read at the epoch's end finds step 2's loss. Its analyses skip those steps; it
    is recorded diverged, and its healthy group-mate trains on, measured at every step, to a finished
    result (before, the NaN table raised out of the group and failed both members)."""
    from embinit.train.fused import run_fused
    cfgs = [TINY, BLOWS_UP]
    settings = {name: every_step(name, tmp_path) for name in ANALYSES}
    made = [analysed({**settings, "similarity": {**settings["similarity"], "snapshot_dir": str(tmp_path / f"s{i}")}},
                     cfg, tmp_path / f"m{i}") for i, cfg in enumerate(cfgs)]
    results = run_fused(cfgs, out_dirs=[tmp_path / "m0", tmp_path / "m1"], callbacks=[cbs for cbs, _ in made],
                        resume=False, cache_dir=False, sync_every=4)
    (healthy, healthy_log), (broken, broken_log) = made
    assert [r.info["execution"]["mode"] for r in results] == ["fused", "fused"]
    assert (results[0].status, results[1].status, results[1].diverged_step) == ("finished", "diverged", 2)
    assert {cb.prefix: cb.skipped_steps for cb in healthy} == {"probe": [], "sim": []}
    assert sorted({step for step, _ in healthy_log}) == list(range(TINY.epochs * 2 + 1))
    assert {cb.prefix: cb.skipped_steps for cb in broken} == {"probe": [2], "sim": [1, 2]}
    assert [step for step, _ in broken_log] == [0, 0] and all_finite(healthy_log) and all_finite(broken_log)


def test_a_seed_comparing_with_a_diverged_reference_seed_does_not_wait_for_its_missing_snapshots(tmp_path):
    """The blog specs give `wait_s` 600-900 s: a seed waits that long for each snapshot its reference seed
    has not written yet. A reference that diverged at step 2 writes no more (and none for its NaN step 1):
    its series' end (`knn_end.json`) tells the other seed so, which skips steps 1-4 at once (before, it
    waited `wait_s` at each of them)."""
    import time

    from embinit.analysis.similarity_callback import SimilarityCallback
    from embinit.train import run_trial
    writer = SimilarityCallback(snapshot_dir=tmp_path / "ref", every_n_steps=1, k=3)
    ref = run_trial(BLOWS_UP, callbacks=[writer], resume=False, cache_dir=False)
    assert (ref.status, writer.skipped_steps) == ("diverged", [1])
    wait_s = 5.0
    reader = SimilarityCallback(reference_snapshots=tmp_path / "ref", every_n_steps=1, k=3, wait_s=wait_s)
    t0 = time.monotonic()
    result = run_trial(TINY, callbacks=[reader], resume=False, cache_dir=False)
    assert time.monotonic() - t0 < wait_s, "the seed waited for snapshots that will never come"
    assert result.status == "finished"
    assert [h["step"] for h in reader.history] == [0] and reader.missing_steps == [1, 2, 3, 4]
