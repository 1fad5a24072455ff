"""Fused execution (embinit.train.fused): a member of a fused group is the same trial as when it runs
alone. Tolerances: the same init tables exactly; losses to 1e-5 relative with dropout off and 1e-4 with
dropout on (members draw their own dropout masks, so the curves match too, not only their statistics);
only the float summation order of the batched kernels differs."""

import math

import pytest
import torch

from embinit.config import TrialConfig
from embinit.tasks.synthetic import LEXICON
from embinit.train import run_trial
from embinit.train.fused import run_fused

TINY = {"threads": 1, "epochs": 2, "max_train_examples": 200, "d_model": 16, "heads": 2, "ff_dim": 32,
        "extras": {"val_bleu": False}}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def cfg(seed=0, init="xavier", task="synthetic_translation", **kw):
    return TrialConfig(task=task, seed=seed, init=init, **{**TINY, **kw})


class InitTable:
    def __init__(self):
        self.tables = None

    def on_train_start(self, ctx):
        self.tables = {k: e.weight.detach().clone() for k, e in ctx.model.embeddings().items()}


def close(a, b, rel):
    return math.isclose(a, b, rel_tol=rel, abs_tol=rel)


def assert_same_trial(sep, fused, rel):
    assert (sep.key, sep.status, sep.best_epoch, sep.diverged_step) == (
        fused.key, fused.status, fused.best_epoch, fused.diverged_step)
    assert sep.emb_stats_init == fused.emb_stats_init
    assert len(sep.history) == len(fused.history)
    for a, b in zip(sep.history, fused.history):
        for name in ("train/loss", "val/loss"):
            assert close(a[name], b[name], rel), (name, a[name], b[name])
    for name, value in sep.test.items():
        assert close(value, fused.test[name], rel), (name, value, fused.test[name])


@pytest.mark.parametrize("dropout, rel", [(0.0, 1e-5), (0.1, 1e-4)])
def test_fused_members_are_the_separate_trials(cache, dropout, rel):
    cfgs = [cfg(0, dropout=dropout), cfg(1, dropout=dropout), cfg(0, "normal", dropout=dropout)]
    seen_sep, seen_fused = [InitTable() for _ in cfgs], [InitTable() for _ in cfgs]
    sep = [run_trial(c, callbacks=[s], cache_dir=cache) for c, s in zip(cfgs, seen_sep)]
    fused = run_fused(cfgs, callbacks=[[s] for s in seen_fused], cache_dir=cache)
    for a, b, ta, tb in zip(sep, fused, seen_sep, seen_fused):
        assert_same_trial(a, b, rel)
        assert all(torch.equal(ta.tables[k], tb.tables[k]) for k in ta.tables)  # the same init, bit for bit
        assert a.info["execution"] == {"mode": "separate"}
        assert b.info["execution"]["mode"] == "fused" and b.info["execution"]["group_size"] == 3
    pad = fused[0].info["execution"]["padding"]
    assert pad["fused_slots"] >= pad["separate_slots"] >= pad["real_tokens"] > 0


def write_vectors(path, dim, value):
    words = sorted(set(LEXICON.values()))
    path.write_text("".join(f"{w} " + " ".join([str(value)] * dim) + "\n" for w in words))
    return str(path)


def test_a_diverging_member_stops_and_the_others_go_on(tmp_path):
    huge, fine = write_vectors(tmp_path / "huge.txt", 16, 1e30), write_vectors(tmp_path / "ok.txt", 16, 0.1)
    cfgs = [cfg(0, dropout=0.1), cfg(0, "glove", pretrained=huge, dropout=0.1),
            cfg(1, "glove", pretrained=fine, dropout=0.1)]
    fused = run_fused(cfgs, cache_dir=tmp_path / "c")
    assert fused[1].status == "diverged" and fused[1].diverged_step == 1 and fused[1].history == []
    assert fused[1].test == {}
    for c, f in zip([cfgs[0], cfgs[2]], [fused[0], fused[2]]):
        # the survivors redo the step with their dropout streams rewound: still the separate trial
        assert_same_trial(run_trial(c, cache_dir=tmp_path / "c"), f, 1e-4)


class StopAfterEpoch1:
    def on_epoch_end(self, ctx, epoch, metrics):
        if epoch == 1:
            raise RuntimeError("stop")


def test_a_fused_members_checkpoint_resumes_as_a_separate_trial(cache, tmp_path):
    """last.pt of a fused member (weights, its slice of Adam's moments, its dropout stream) has the
    separate format: the trial killed after epoch 1 of a fused run finishes alone as if never fused."""
    cfgs = [cfg(0, dropout=0.1), cfg(3, dropout=0.1)]
    dirs = [tmp_path / "a", tmp_path / "b"]
    with pytest.raises(RuntimeError, match="stop"):
        run_fused(cfgs, out_dirs=dirs, callbacks=[[], [StopAfterEpoch1()]], cache_dir=cache)
    resumed = run_trial(cfgs[0], out_dir=dirs[0], resume=True, cache_dir=cache)
    assert_same_trial(run_trial(cfgs[0], cache_dir=cache), resumed, 1e-4)
    assert resumed.checkpoint_path and len(resumed.history) == 2


def test_kinds_that_do_not_fuse_run_as_separate_trials(cache):
    cfgs = [cfg(0, task="synthetic_classification", d_model=None, epochs=1),
            cfg(1, task="synthetic_classification", d_model=None, epochs=1)]
    fused = run_fused(cfgs, cache_dir=cache)
    for c, f in zip(cfgs, fused):
        assert f.info["execution"]["mode"] == "separate"
        assert "classification does not fuse yet" in f.info["execution"]["fuse_refused"]
        assert_same_trial(run_trial(c, cache_dir=cache), f, 0.0)
