"""Fused execution (embinit.train.fused): a member of a fused group is the same trial as when it runs
alone. Tolerances: the same init tables exactly; losses to 1e-5 relative with dropout off and 1e-4 with
dropout on (members draw their own dropout masks, so the curves match too, not only their statistics);
only the float summation order of the batched kernels differs."""

import math
from types import SimpleNamespace

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


KINDS = [("synthetic_translation", {}), ("synthetic_classification", {}), ("synthetic_lm", {}),
         ("synthetic_lm", {"tie_embeddings": True, "pre_ln": True})]


@pytest.mark.parametrize("task, kw", KINDS, ids=["translation", "classification", "lm", "lm-tied-preln"])
@pytest.mark.parametrize("dropout, rel", [(0.0, 1e-5), (0.1, 1e-4)])
def test_fused_members_are_the_separate_trials(cache, task, kw, dropout, rel):
    cfgs = [cfg(0, task=task, dropout=dropout, **kw), cfg(1, task=task, dropout=dropout, **kw),
            cfg(0, "normal", task=task, dropout=dropout, **kw)]
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
    if task != "synthetic_lm":   # sentences of many lengths: the members' batches differ, so padding ran
        assert pad["fused_slots"] > pad["separate_slots"]


@pytest.mark.parametrize("task", ["synthetic_translation", "synthetic_classification", "synthetic_lm"])
def test_fused_members_draw_their_own_attention_and_activation_dropout(cache, task):
    """With only the attention-weight and feed-forward-activation dropout on, each fused member is its
    separate trial: its masks come from its own generator, for its own batch's shape (translation
    members' batches differ in length, so they are padded: cross-attention's weights are the member's
    queries x its own source keys)."""
    kw = {"dropout": 0.0, "attention_dropout": 0.2, "activation_dropout": 0.2}
    cfgs = [cfg(0, task=task, **kw), cfg(1, task=task, **kw)]
    sep = [run_trial(c, cache_dir=cache) for c in cfgs]
    fused = run_fused(cfgs, cache_dir=cache)
    for a, b in zip(sep, fused):
        assert b.info["execution"]["mode"] == "fused"
        assert_same_trial(a, b, 1e-4)
    undropped = run_trial(cfg(0, task=task, dropout=0.0), cache_dir=cache)
    assert not close(undropped.history[0]["train/loss"], sep[0].history[0]["train/loss"], 1e-3)   # masks drawn


def test_members_of_other_dropout_rates_run_as_separate_trials(cache):
    """A fused model has one rate a dropout site: members that differ in one train alone, each at its own."""
    cfgs = [cfg(0, task="synthetic_lm", epochs=1, attention_dropout=0.1), cfg(1, task="synthetic_lm", epochs=1)]
    fused = run_fused(cfgs, cache_dir=cache)
    for c, f in zip(cfgs, fused):
        assert f.info["execution"] == {"mode": "separate", "fuse_refused": "members differ in dropout (dropout, "
                                       "attention_dropout, activation_dropout)"}
        assert_same_trial(run_trial(c, cache_dir=cache), f, 0.0)


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


def test_members_that_train_different_weights_run_as_separate_trials(cache):
    """A stacked weight has one requires_grad: fused with a frozen-embedding member (the Table 3 ablation),
    a trainable member's tables stayed frozen (its val perplexity 37.98 where alone 37.03)."""
    cfgs = [cfg(0, task="synthetic_lm", epochs=1, train_embeddings=False), cfg(1, task="synthetic_lm", epochs=1)]
    fused = run_fused(cfgs, cache_dir=cache)
    for c, f in zip(cfgs, fused):
        assert f.info["execution"] == {"mode": "separate", "fuse_refused": "members differ in which weights "
                                       "train (train_embeddings, freeze_non_embeddings)"}
        assert_same_trial(run_trial(c, cache_dir=cache), f, 0.0)


def test_kinds_that_do_not_fuse_run_as_separate_trials(cache):
    from helpers import toy_task
    toy_task.register()
    try:
        cfgs = [cfg(0, task=toy_task.TASK, epochs=1), cfg(1, task=toy_task.TASK, epochs=1)]
        fused = run_fused(cfgs, cache_dir=cache)
        for c, f in zip(cfgs, fused):
            assert f.info["execution"]["mode"] == "separate"
            assert f"{toy_task.KIND} does not fuse (only ['translation', 'classification', 'lm'] do)" == \
                f.info["execution"]["fuse_refused"]
            assert_same_trial(run_trial(c, cache_dir=cache), f, 0.0)
    finally:
        toy_task.unregister()


@pytest.mark.parametrize("task", ["synthetic_classification", "synthetic_lm"])
def test_a_diverging_classifier_or_lm_member_leaves_and_the_others_go_on(cache, monkeypatch, task):
    """Member 1's loss (and gradient) becomes inf at step 2: it is diverged there with its first
    epoch never finished; the others are exactly their separate runs."""
    from embinit import task_registry
    fused_cls = task_registry.kind_code(task_registry.task_entry(task).kind, "fused")
    original, calls = fused_cls.losses, []

    def losses(self, *args):
        out = original(self, *args)
        calls.append(len(calls) + 1)
        return out * torch.tensor([1.0, math.inf, 1.0]) if len(calls) == 2 else out

    monkeypatch.setattr(fused_cls, "losses", losses)
    cfgs = [cfg(0, task=task, dropout=0.1), cfg(1, task=task, dropout=0.1), cfg(0, "normal", task=task, dropout=0.1)]
    fused = run_fused(cfgs, cache_dir=cache)
    assert (fused[1].status, fused[1].diverged_step, fused[1].history, fused[1].test) == ("diverged", 2, [], {})
    for c, f in zip([cfgs[0], cfgs[2]], [fused[0], fused[2]]):
        assert f.status == "finished" and f.info["execution"]["mode"] == "fused"
        assert_same_trial(separate(c, cache), f, 1e-4)


# the windowed step: divergence with its exact step, early stopping, no host reads between windows ------
SEPARATE = {}


def separate(c, cache):
    """run_trial's result for `c` (each config trained once per test session)."""
    if c.key() not in SEPARATE:
        SEPARATE[c.key()] = run_trial(c, cache_dir=cache)
    return SEPARATE[c.key()]


@pytest.mark.parametrize("every, poison", [(1, {1: 9}), (4, {1: 9, 2: 10}), (4, {2: 14})])
def test_divergence_in_a_read_window_keeps_its_step_and_spares_the_others(cache, monkeypatch, every, poison):
    """Member p's loss becomes inf at step `poison[p]` (its gradient too, so its weights go NaN in the
    window's later steps). 7 steps an epoch; with every=4 the reads come after steps 4, 7, 11, 14: the
    bad steps 9 and 10 are read at 11, step 14 at the epoch's end. Each diverged member reports its exact
    step and keeps its first epoch; the others are exactly their separate runs."""
    from embinit.models.fused import FusedEncoderDecoder
    original, calls = FusedEncoderDecoder.losses, []

    def losses(self, *args):
        out = original(self, *args)
        calls.append(len(calls) + 1)
        scale = [math.inf if poison.get(g) == len(calls) else 1.0 for g in range(self.G)]
        return out * torch.tensor(scale) if math.inf in scale else out

    monkeypatch.setattr(FusedEncoderDecoder, "losses", losses)
    cfgs = [cfg(0, dropout=0.1), cfg(1, dropout=0.1), cfg(0, "normal", dropout=0.1)]
    fused = run_fused(cfgs, cache_dir=cache, sync_every=every)
    assert len(calls) == 14    # no step is redone
    for g, (c, f) in enumerate(zip(cfgs, fused)):
        sep = separate(c, cache)
        if g not in poison:
            assert_same_trial(sep, f, 1e-4)
            continue
        assert (f.status, f.diverged_step, f.test, f.best_epoch) == ("diverged", poison[g], {}, 1)
        assert len(f.history) == 1 and close(f.history[0]["val/loss"], sep.history[0]["val/loss"], 1e-4)


def test_a_member_that_stops_early_leaves_and_every_member_is_its_separate_run(cache):
    """patience 1 at lr 0.03 on 64 examples (2 steps an epoch): the first member's validation loss rises
    at epoch 4, so it stops there; the other two go on to epoch 6 in a group of two."""
    kw = {"dropout": 0.1, "lr": 0.03, "epochs": 6, "max_train_examples": 64, "early_stopping_patience": 1}
    cfgs = [cfg(3, "normal", **kw), cfg(0, **kw), cfg(1, "normal", **kw)]
    seen = []
    fused = run_fused(cfgs, cache_dir=cache, group_callbacks=[SimpleNamespace(on_group_epoch_end=seen.append)])
    assert [len(f.history) for f in fused] == [4, 6, 6] and fused[0].best_epoch == 3
    assert seen == [1, 2, 3, 4, 5, 6]
    for c, f in zip(cfgs, fused):
        assert f.status == "finished" and f.info["execution"]["mode"] == "fused"
        assert_same_trial(run_trial(c, cache_dir=cache), f, 1e-4)


@pytest.mark.parametrize("task", ["synthetic_translation", "synthetic_classification"])
def test_the_fused_step_reads_the_device_once_per_window(cache, monkeypatch, task):
    """12 steps, reads every 5: the losses come back in three transfers ([5, G], [5, G], then the last
    [2, G]) and nothing else in the step reads a device value (the padding mask built as on a GPU)."""
    from test_train_hostsync import HostReads

    from embinit import task_registry
    from embinit.models import embedding
    TaskClass = task_registry.kind_code(task_registry.task_entry(task).kind, "task")
    monkeypatch.setattr(embedding, "cheap_host_reads", lambda device: False)
    reads, recording, transfers, seen = HostReads(), [], [], []
    build = TaskClass.train_batches

    def train_batches(self, generator):   # built on the host before the steps, as on a GPU
        reads.__exit__(None, None, None)
        out = build(self, generator)
        reads.__enter__()
        return out

    def tolist(t):
        transfers.append(tuple(t.shape))
        return original_tolist(t)

    original_tolist = torch.Tensor.tolist
    monkeypatch.setattr(TaskClass, "train_batches", train_batches)
    monkeypatch.setattr(torch.Tensor, "tolist", tolist)

    def start(ctx):
        reads.__enter__()
        recording.append(True)

    def step_end(ctx, step, loss):
        seen.append((step, loss))
        if step == 12:
            reads.__exit__(None, None, None)

    probe = SimpleNamespace(on_train_start=start, on_step_end=step_end)
    cfgs = [cfg(s, task=task, dropout=0.1, epochs=1, max_train_examples=96, batch_size=8) for s in (0, 1, 2)]
    fused = run_fused(cfgs, callbacks=[[probe], [], []], cache_dir=cache, sync_every=5)
    assert recording and reads.ops == [], reads.ops
    assert [t for t in transfers if len(t) == 2 and t[1] == 3] == [(5, 3), (5, 3), (2, 3)]
    assert [st for st, _ in seen] == list(range(1, 13))
    assert all(math.isnan(v) for _, v in seen[:4]) and not any(math.isnan(v) for _, v in seen[4:])
    assert seen[4][1] == seen[8][1] and seen[9][1] != seen[4][1]
    assert all(f.status == "finished" and f.history[0]["train/loss"] > 0 for f in fused)


@pytest.mark.parametrize("task", ["synthetic_translation", "synthetic_classification", "synthetic_lm"])
def test_the_fused_step_s_kernels_grow_only_by_each_member_s_own_draws(cache, task, monkeypatch):
    """On a GPU a small model's step is bound by kernel launches. A fused step (forward and backward)
    launches what a one-member step launches plus, per extra member and dropout site, its own draw (from
    its own generator) and, when batches are padded, one copy into the mask: not a per-member share of
    every mask operation. Counted by bench/bench_fused_ops.py."""
    import importlib.util
    from pathlib import Path
    bench = Path(__file__).resolve().parents[1] / "bench"
    monkeypatch.syspath_prepend(str(bench))
    spec = importlib.util.spec_from_file_location("bench_fused_ops", bench / "bench_fused_ops.py")
    ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ops)
    config = {**TINY, "dropout": 0.1}

    one = ops.count(task, 1, cache, config)
    sites = one["draws"]
    for g in (2, 8):
        n = ops.count(task, g, cache, config)
        assert n["draws"] == g * sites
        assert n["kernels"] - one["kernels"] <= (g - 1) * 2 * sites + 16, (g, n, one, sites)


@pytest.mark.parametrize("task", ["synthetic_lm", "synthetic_translation"])
def test_knn_similarity_of_fused_members_is_the_separate_trials(cache, tmp_path, task):
    """The blog's analysis in a fused group: the reference seed writes a KNN snapshot every 3 steps (not
    an epoch boundary), the other seed compares with it at the same step. The reader comes first in the
    group, yet fires after its writer, and each measures its current weights, not the last epoch's:
    the curves are the separate trials' (the same neighbour lists, so the same scores)."""
    from embinit.analysis.callbacks import SimilarityCallback

    def pair(root):
        writer = SimilarityCallback(every_n_steps=3, k=5, metric="overlap", snapshot_dir=root / "w")
        reader = SimilarityCallback(every_n_steps=3, k=5, metric="overlap", snapshot_dir=root / "r",
                                    reference_snapshots=root / "w")
        return writer, reader

    cfgs = [cfg(1, task=task, dropout=0.1), cfg(0, task=task, dropout=0.1)]    # reader, writer
    w_sep, r_sep = pair(tmp_path / "sep")
    run_trial(cfgs[1], callbacks=[w_sep], cache_dir=cache)
    run_trial(cfgs[0], callbacks=[r_sep], cache_dir=cache)
    w_fused, r_fused = pair(tmp_path / "fused")
    fused = run_fused(cfgs, callbacks=[[r_fused], [w_fused]], cache_dir=cache)
    assert all(f.info["execution"]["mode"] == "fused" for f in fused)
    assert r_fused.missing_steps == [] and len(r_fused.history) > 3
    steps = [h["step"] for h in r_sep.history]
    assert [h["step"] for h in r_fused.history] == steps and steps[:3] == [0, 3, 6]
    for a, b in zip(r_sep.history, r_fused.history):
        assert b["sim/knn_overlap_mean"] == pytest.approx(a["sim/knn_overlap_mean"], abs=1e-9), a["step"]
    assert sorted(p.name for p in (tmp_path / "fused" / "w").iterdir()) == \
        sorted(p.name for p in (tmp_path / "sep" / "w").iterdir())
