from types import SimpleNamespace

import pytest
import torch
from torch import nn

from embinit.analysis.callbacks import (ProbeCallback, SimilarityCallback, make_callbacks,
                                        similarity_curve)
from embinit.analysis.similarity import knn_match_similarity
from embinit.errors import EmbinitError
from embinit.vocab import Vocab

torch.set_num_threads(1)
N, D = 80, 8
TOKENS = [f"w{i}" for i in range(N)]


class TinyModel(nn.Module):
    def __init__(self, table):
        super().__init__()
        self.emb = nn.Embedding(*table.shape)
        with torch.no_grad():
            self.emb.weight.copy_(table)

    def embeddings(self):
        return {"tok": self.emb}


def ctx_for(table, tokens=TOKENS):
    return SimpleNamespace(model=TinyModel(table), data=SimpleNamespace(vocab=Vocab(tokens)),
                           cfg=SimpleNamespace(pe_base=10000.0), step=0, epoch=0)


def tables(seed, count=4):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(N, D, generator=g) for _ in range(count)]


def train(ctx, trajectory, callbacks, every=1):
    """Fake training: after step s the table is trajectory[s]."""
    for cb in callbacks:
        cb.on_train_start(ctx)
    for step, table in enumerate(trajectory[1:], 1):
        with torch.no_grad():
            ctx.model.emb.weight.copy_(table)
        ctx.step = step
        for cb in callbacks:
            if hasattr(cb, "on_step_end"):
                cb.on_step_end(ctx, step, 0.0)
    for cb in callbacks:
        cb.on_train_end(ctx, None)


def test_logs_similarity_to_a_fixed_reference_every_n_steps():
    traj = tables(0, 4)
    ref = traj[0].clone()
    logged = []
    cb = SimilarityCallback(ref, every_n_steps=2, k=5, log_fn=lambda m, s: logged.append((s, m)))
    train(ctx_for(traj[0]), traj, [cb])
    # step 0 (start), step 2 (every 2), step 3 (the end, not a multiple of 2)
    assert [s for s, _ in logged] == [0, 2, 3]
    assert logged[0][1] == {"sim/knn_jaccard_mean": 1.0, "sim/knn_jaccard_median": 1.0}
    for step, metrics in logged[1:]:
        expected = knn_match_similarity(traj[step], ref, k=5).summary
        assert metrics["sim/knn_jaccard_mean"] == pytest.approx(expected["mean"])
        assert metrics["sim/knn_jaccard_median"] == pytest.approx(expected["median"])
    assert [h["step"] for h in cb.history] == [0, 2, 3]


def test_similarity_over_the_tokens_training_saw():
    """Blog experiment 2: a GPT-2 vocabulary keeps rows training never saw; the callback logs the mean
    over the seen tokens (counts > 0) beside the all-token mean, and it is the mask's own aggregate."""
    traj = tables(5, 2)
    seen = [i % 3 != 0 for i in range(N)]
    counts = {t: 4 for t, s in zip(TOKENS, seen) if s}
    ctx = SimpleNamespace(model=TinyModel(traj[0]), data=SimpleNamespace(vocab=Vocab(TOKENS, counts)), step=0)
    logged = []
    cb = SimilarityCallback(traj[0].clone(), every_n_steps=1, k=5, log_fn=lambda m, s: logged.append((s, m)))
    train(ctx, traj, [cb])
    step, metrics = logged[-1]
    full = knn_match_similarity(traj[1], traj[0], k=5).summary
    part = knn_match_similarity(traj[1], traj[0], k=5, exclude=[not x for x in seen]).summary
    assert metrics["sim/knn_jaccard_mean"] == pytest.approx(full["mean"])
    assert metrics["sim/seen/knn_jaccard_mean"] == pytest.approx(part["mean"])
    assert metrics["sim/seen/knn_jaccard_mean"] != pytest.approx(full["mean"])
    assert metrics["sim/seen/tokens"] == sum(seen)
    # a vocabulary without counts: no seen-token metrics
    logged.clear()
    train(ctx_for(traj[0]), traj, [SimilarityCallback(traj[0].clone(), every_n_steps=1, k=5,
                                                      log_fn=lambda m, s: logged.append(m))])
    assert not any(k.startswith("sim/seen/") for m in logged for k in m)


def test_snapshot_reference_compares_the_same_step(tmp_path):
    traj_a, traj_b = tables(1, 4), tables(2, 4)
    snap = tmp_path / "a_snaps"
    train(ctx_for(traj_a[0]), traj_a, [SimilarityCallback(snapshot_dir=snap, every_n_steps=1, k=4)])
    # one snapshot per step, and the series' end (run A's trial ended: a reader waits for no later step)
    assert sorted(p.name for p in snap.iterdir()) == ["knn_end.json", *(f"knn_step{s:08d}.pt" for s in range(4))]
    (snap / "knn_step00000002.pt").unlink()         # a step run A never wrote
    logged = []
    cb = SimilarityCallback(reference_snapshots=snap, every_n_steps=1, k=4, metric="overlap",
                            log_fn=lambda m, s: logged.append((s, m["sim/knn_overlap_mean"])))
    train(ctx_for(traj_b[0]), traj_b, [cb])
    assert [s for s, _ in logged] == [0, 1, 3] and cb.missing_steps == [2]
    for step, value in logged:
        expected = knn_match_similarity(traj_b[step], traj_a[step], k=4, metric="overlap").summary["mean"]
        assert value == pytest.approx(expected)
    # the same curve, recomputed afterwards from two snapshot folders
    snap_b = tmp_path / "b_snaps"
    train(ctx_for(traj_b[0]), traj_b, [SimilarityCallback(snapshot_dir=snap_b, every_n_steps=1, k=4)])
    curve = similarity_curve(snap, snap_b, k=4, metric="overlap")
    assert [c["step"] for c in curve] == [0, 1, 3]
    assert [c["mean"] for c in curve] == pytest.approx([v for _, v in logged])
    with pytest.raises(EmbinitError, match="K=4 dot neighbours; K=6 dot was asked"):
        similarity_curve(snap, snap_b, k=6)


def test_snapshot_of_another_vocabulary_is_refused(tmp_path):
    traj = tables(3, 2)
    train(ctx_for(traj[0]), traj, [SimilarityCallback(snapshot_dir=tmp_path, every_n_steps=1, k=3)])
    other = [f"x{i}" for i in range(N)]
    cb = SimilarityCallback(reference_snapshots=tmp_path, every_n_steps=1, k=3)
    with pytest.raises(EmbinitError, match="another vocabulary"):
        cb.on_train_start(ctx_for(traj[0], other))


def test_checkpoint_reference_is_aligned_on_shared_tokens(tmp_path):
    traj = tables(4, 2)
    ckpt = tmp_path / "best.pt"
    # the reference knows the first 60 tokens only, with the same vectors as the model at step 0
    torch.save({"embeddings": {"tok": traj[0][:60]}, "vocabs": {"tok": TOKENS[:60]}}, ckpt)
    logged = []
    cb = SimilarityCallback(str(ckpt), every_n_steps=1, k=5, log_fn=lambda m, s: logged.append(m))
    cb.on_train_start(ctx_for(traj[0]))
    assert logged[0]["sim/knn_jaccard_mean"] == 1.0


def test_probe_callback_logs_start_epochs_and_end():
    traj = tables(5, 2)
    logged = []
    cb = ProbeCallback(every_n_epochs=1, log_fn=lambda m, s: logged.append((s, m)), n_samples=200)
    ctx = ctx_for(traj[0] * 0.01)
    cb.on_train_start(ctx)
    ctx.step = 7
    cb.on_epoch_end(ctx, 1, {})
    cb.on_train_end(ctx, None)           # already measured at step 7: not again
    assert [s for s, _ in logged] == [0, 7]
    assert all("probe/pos_acc" in m and "probe/token_acc" in m for _, m in logged)


def test_constructor_and_factory_errors(tmp_path):
    with pytest.raises(EmbinitError, match="needs a reference, reference_snapshots or a snapshot_dir"):
        SimilarityCallback()
    with pytest.raises(EmbinitError, match="not both"):
        SimilarityCallback(torch.zeros(3, 2), reference_snapshots=tmp_path)
    with pytest.raises(EmbinitError, match="every_n_steps"):
        SimilarityCallback(torch.zeros(3, 2), every_n_steps=0)
    with pytest.raises(EmbinitError, match="'iou' is not a registered similarity metric"):
        SimilarityCallback(torch.zeros(3, 2), metric="iou")
    with pytest.raises(EmbinitError, match="'l2' is not a registered neighbour metric"):
        SimilarityCallback(torch.zeros(3, 2), neighbours="l2")
    with pytest.raises(EmbinitError, match=r"unknown analyses \['knn'\]"):
        make_callbacks({"knn": {}})
    with pytest.raises(EmbinitError, match="out_dir"):
        make_callbacks({"similarity": {"snapshot": True}})
    cbs = make_callbacks({"similarity": {"snapshot": True, "every_n_steps": 10}, "probe": {}},
                         out_dir=tmp_path)
    assert isinstance(cbs[0], SimilarityCallback) and cbs[0].snapshot_dir == tmp_path / "knn_snapshots"
    assert isinstance(cbs[1], ProbeCallback)
    # a reference folder that does not exist yet (the other run has not started): steps are skipped
    later = SimilarityCallback(reference_snapshots=tmp_path / "not_yet", k=3)
    traj = tables(7, 2)
    later.on_train_start(ctx_for(traj[0]))
    assert later.missing_steps == [0] and later.history == []


@pytest.mark.slow
def test_with_the_real_trainer(tmp_path):
    from embinit.config import TrialConfig
    from embinit.train import run_trial

    cfg = TrialConfig(task="synthetic_lm", epochs=1, d_model=16, threads=1)
    logged = []
    sim = SimilarityCallback(snapshot_dir=tmp_path / "snaps", every_n_steps=10, k=5)
    probe = ProbeCallback(log_fn=lambda m, s: logged.append(s), n_samples=300)
    res = run_trial(cfg, out_dir=tmp_path / "run", callbacks=[sim, probe], resume=False)
    steps = sorted(int(p.stem[8:]) for p in (tmp_path / "snaps").glob("knn_step*.pt"))
    assert steps[0] == 0 and steps[-1] == logged[-1] and logged[0] == 0
    assert all(s % 10 == 0 for s in steps[:-1])
    # compare the trained run with its own checkpoint: the final step must agree perfectly
    final = []
    SimilarityCallback(str(tmp_path / "run" / "best.pt"), k=5, log_fn=lambda m, s: final.append(m)) \
        .measure(SimpleNamespace(model=_Reloaded(tmp_path / "run" / "best.pt"), data=None), 0)
    assert final[0]["sim/knn_jaccard_mean"] == 1.0 and res.status == "finished"


class _Reloaded:
    def __init__(self, path):
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        self.emb = nn.Embedding.from_pretrained(ckpt["embeddings"]["tok"])

    def embeddings(self):
        return {"tok": self.emb}


def test_similarity_figure_from_a_callback_history(tmp_path):
    from embinit.analysis.plots import similarity_figure

    traj = tables(6, 3)
    cb = SimilarityCallback(traj[0].clone(), every_n_steps=1, k=3)
    train(ctx_for(traj[0]), traj, [cb])
    png = similarity_figure(cb.history, tmp_path / "sim.png", perplexity=[(1, 80.0), (2, 60.0)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000
    with pytest.raises(EmbinitError, match="empty"):
        similarity_figure([], tmp_path / "x.png")


def test_the_blogs_score_is_logged_beside_jaccard():
    """metric=[overlap, jaccard] (the blog specs): |∩|/K, what the blog's code published, and |∩|/|∪|
    from the same neighbour lists, at every measured step."""
    traj = tables(7, 3)
    ref = traj[0] + 0.8 * torch.randn(N, D, generator=torch.Generator().manual_seed(8))
    logged = []
    cb = SimilarityCallback(ref, every_n_steps=1, k=5, metric=["overlap", "jaccard"],
                            log_fn=lambda m, s: logged.append(m))
    train(ctx_for(traj[0]), traj, [cb])
    for step, metrics in enumerate(logged):
        for score in ("overlap", "jaccard"):
            expected = knn_match_similarity(traj[step], ref, k=5, metric=score).summary
            assert metrics[f"sim/knn_{score}_mean"] == pytest.approx(expected["mean"])
            assert metrics[f"sim/knn_{score}_median"] == pytest.approx(expected["median"])
    assert logged[0]["sim/knn_overlap_mean"] > logged[0]["sim/knn_jaccard_mean"]   # I/K > I/(2K-I)
    assert list(cb.history[0])[:2] == ["step", "sim/knn_overlap_mean"]            # the figure's score


def test_an_unknown_score_in_a_list_is_named():
    with pytest.raises(EmbinitError, match="'iou' is not a registered similarity metric"):
        SimilarityCallback(torch.zeros(N, D), metric=["overlap", "iou"])


def _end_of_a_finished_trial(ctx, callbacks, last, best):
    """The trainer's end: the last epoch ends at step 3 with table `last`, then a finished trial's model
    is given its best epoch's table `best` (for the test) before `on_train_end`."""
    ctx.step = 3
    with torch.no_grad():
        ctx.model.emb.weight.copy_(last)
    for cb in callbacks:
        cb.on_epoch_end(ctx, 1, {})
    with torch.no_grad():
        ctx.model.emb.weight.copy_(best)
    for cb in callbacks:
        cb.on_train_end(ctx, SimpleNamespace(status="finished"))


def test_the_last_similarity_point_is_the_last_steps_table_not_the_best_checkpoint():
    """The curve's point at the last step measures the table the last step left, as every other point
    does, not the best epoch's weights the trainer loads for the test before train end."""
    first, last, best = tables(11, 3)
    logged = []
    cb = SimilarityCallback(last.clone(), every_n_steps=1000, k=5, log_fn=lambda m, s: logged.append((s, m)))
    ctx = ctx_for(first)
    cb.on_train_start(ctx)
    _end_of_a_finished_trial(ctx, [cb], last, best)
    assert [s for s, _ in logged] == [0, 3]
    assert logged[-1][1]["sim/knn_jaccard_mean"] == 1.0      # the last table against itself


def test_the_last_probe_point_is_the_last_steps_table_and_the_best_is_logged_beside():
    first, last, best = tables(12, 3)
    logged = []
    cb = ProbeCallback(log_fn=lambda m, s: logged.append((s, m)), n_samples=200, summary=True)
    ctx = ctx_for(first * 0.01)
    cb.on_train_start(ctx)
    _end_of_a_finished_trial(ctx, [cb], last * 0.01, best)
    at_end = {k: v for s, m in logged if s == 3 for k, v in m.items()}
    assert at_end["probe/absorption"] == pytest.approx(cb.probe(ctx_for(last * 0.01))["probe/absorption"])
    assert at_end["best/probe/absorption"] == pytest.approx(cb.probe(ctx_for(best))["probe/absorption"])
    assert at_end["probe/absorption"] != pytest.approx(at_end["best/probe/absorption"])


def test_a_reference_snapshot_of_other_settings_is_a_missing_step_not_a_failure(tmp_path, caplog):
    # the reference seed finished under K=3; the spec's analyses.similarity then asked K=5 (or cosine)
    # and a rerun resumed another seed: it cannot compare those steps, and it must not fail its trial
    traj_a, traj_b = tables(5, 3), tables(6, 3)
    snap = tmp_path / "a_snaps"
    train(ctx_for(traj_a[0]), traj_a, [SimilarityCallback(snapshot_dir=snap, every_n_steps=1, k=3)])
    for k, neighbours in ((5, "dot"), (3, "cosine")):
        logged = []
        cb = SimilarityCallback(reference_snapshots=snap, every_n_steps=1, k=k, neighbours=neighbours,
                                log_fn=lambda m, s, out=logged: out.append(s))
        with caplog.at_level("WARNING", logger="embinit.analysis.similarity_callback"):
            caplog.clear()
            train(ctx_for(traj_b[0]), traj_b, [cb])
        assert logged == [] and cb.missing_steps == [0, 1, 2]
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 1 and "K=3 dot neighbours" in said[0] and "other analyses.similarity" in said[0]
    # fewer neighbours than the snapshot holds are still compared (the first k of its sorted K)
    logged = []
    train(ctx_for(traj_b[0]), traj_b, [SimilarityCallback(reference_snapshots=snap, every_n_steps=1, k=2,
                                                          log_fn=lambda m, s: logged.append(s))])
    assert logged == [0, 1, 2]


def test_the_steps_not_compared_are_said_on_the_run_with_why(tmp_path):
    """`sweep.analyses.not_compared_tags`: the steps a seed could not compare with its reference, split by
    why (no snapshot; one written under other settings), for the run's `embinit.similarity.not_compared`."""
    from embinit.sweep.analyses import not_compared_tags
    from embinit.tracking.records import NOT_COMPARED_TAG
    traj_a, traj_b = tables(5, 3), tables(6, 3)
    snap = tmp_path / "a_snaps"
    train(ctx_for(traj_a[0]), traj_a, [SimilarityCallback(snapshot_dir=snap, every_n_steps=1, k=3)])
    (snap / "knn_step00000002.pt").unlink()   # that step's snapshot is gone
    cb = SimilarityCallback(reference_snapshots=snap, every_n_steps=1, k=5, log_fn=lambda m, s: None)
    train(ctx_for(traj_b[0]), traj_b, [cb])
    assert not_compared_tags([cb]) == {NOT_COMPARED_TAG: (
        "step 2 (1): no reference snapshot; steps 0, 1 (2): the reference's snapshots were written under other "
        f"settings ({snap / 'knn_step00000000.pt'} holds K=3 dot neighbours; K=5 dot was asked)")}
    compared = SimilarityCallback(reference_snapshots=snap, every_n_steps=1, k=3, log_fn=lambda m, s: None)
    train(ctx_for(traj_b[0]), traj_b, [compared])
    assert compared.missing_steps == [2] and not_compared_tags([compared]) == {
        NOT_COMPARED_TAG: "step 2 (1): no reference snapshot"}
    assert not_compared_tags([]) == {} and not_compared_tags([SimilarityCallback(reference_snapshots=snap)]) == {}
