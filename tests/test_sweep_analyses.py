"""The spec's `analyses` section: validation, and a sweep that logs the position probe and the KNN
match similarity into each trial's MLflow run (local Ray, temporary SQLite store, tiny synthetic LM)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from embinit.tracking import mlflow_store
from embinit.spec import SpecError, load_spec
from helpers.sweep import sweep_spec_data

TINY = {"task": "synthetic_lm", "epochs": 2, "d_model": 16, "ff_dim": 32, "heads": 2,
        "max_train_examples": 200}


def spec_data(tmp: Path, analyses, **over) -> dict:
    data = sweep_spec_data("analyses", tmp, TINY)
    if analyses is not None:
        data["analyses"] = analyses
    data.update(over)
    return data


# ---- validation ---------------------------------------------------------------------------------------
def test_analyses_parse_and_do_not_change_trial_keys_or_old_hashes(tmp_path):
    plain = load_spec(spec_data(tmp_path, None))
    spec = load_spec(spec_data(tmp_path, {"probe": True, "similarity": {"reference_seed": 0, "k": 5}}))
    assert spec.analyses.probe.n_samples == 20000 and spec.analyses.similarity.k == 5
    assert [p.key for p in spec.plan()] == [p.key for p in plain.plan()]
    assert "analyses" not in plain.canonical() and load_spec(spec.to_yaml()) == spec
    assert load_spec(spec_data(tmp_path, {"probe": False})).analyses.probe is None


@pytest.mark.parametrize("analyses, where, message", [
    ({"probes": True}, "analyses.probes", "unknown field 'probes'"),
    ({"probe": {"n_samples": 5}}, "analyses.probe.n_samples", "greater than or equal to 10"),
    ({"similarity": {"metric": "iou", "reference_seed": 0}}, "analyses.similarity.metric", "'jaccard'"),
    ({"similarity": {"k": 10}}, "analyses.similarity", "needs a `reference`, a `reference_seed`"),
    ({"similarity": {"reference": "x.pt", "reference_seed": 0}}, "analyses.similarity", "not both"),
    ({"similarity": {"reference_seed": 3}}, "analyses.similarity.reference_seed", "not one of"),
    ({"similarity": {"every_n_steps": 0, "snapshot_dir": "s"}}, "analyses.similarity.every_n_steps",
     "greater than or equal to 1"),
])
def test_invalid_analyses_name_the_field(tmp_path, analyses, where, message):
    with pytest.raises(SpecError) as err:
        load_spec(spec_data(tmp_path, analyses))
    assert any(p == where and message in m for p, m in err.value.problems), err.value.problems


def test_literal_names_match_the_library():
    from embinit.analysis.neighbours import NEIGHBOUR_METRICS
    from embinit.analysis.similarity import SCORES
    from embinit.spec import SimilarityAnalysis
    from embinit.spec.models import Score
    fields = SimilarityAnalysis.model_fields
    assert Score.__args__ == SCORES and fields["metric"].annotation.__args__[0] == Score
    assert fields["neighbours"].annotation.__args__ == NEIGHBOUR_METRICS


def test_workers_get_absolute_paths_and_the_twin_of_the_reference_seed(tmp_path, monkeypatch):
    from embinit.analysis import ProbeCallback, SimilarityCallback
    from embinit.analysis.similarity_callback import twin_key
    from embinit.sweep.analyses import shared_settings, trial_callbacks
    monkeypatch.chdir(tmp_path)
    spec = load_spec(spec_data(tmp_path, {"probe": True, "similarity": {"reference_seed": 0,
                                                                        "snapshot_dir": "snaps"}}, seeds=[0, 1]))
    settings = shared_settings(spec)
    assert settings["similarity"]["snapshot_dir"] == str(tmp_path / "snaps")   # a worker's cwd differs
    cfg0, cfg1 = spec.expand()
    assert twin_key(cfg1, 0) == cfg0.key()
    cbs0 = trial_callbacks(settings, cfg0, lambda m, s: None, tmp_path / "out0")
    cbs1 = trial_callbacks(settings, cfg1, lambda m, s: None, tmp_path / "out1")
    sim0, sim1 = (next(c for c in cbs if isinstance(c, SimilarityCallback)) for cbs in (cbs0, cbs1))
    assert sim0.snapshot_dir == tmp_path / "snaps" / cfg0.key() and sim0.reference_snapshots is None
    assert sim1.reference_snapshots == tmp_path / "snaps" / cfg0.key()
    assert any(isinstance(c, ProbeCallback) and c.summary for c in cbs1)
    assert trial_callbacks(None, cfg0, lambda m, s: None, tmp_path) == []


# ---- end to end ---------------------------------------------------------------------------------------
def history(uri: str, run_id: str, name: str) -> dict[int, float]:
    return {m.step: m.value for m in mlflow_store.client(uri).get_metric_history(run_id, name)}


def reference_file(path: Path) -> Path:
    """A small GloVe-style text file over the synthetic task's words (no specials): the trial aligns
    its table with it on the shared tokens."""
    from embinit.tasks.synthetic import LEXICON
    words = sorted(set(LEXICON.values()))
    g = torch.Generator().manual_seed(1)
    vecs = torch.randn(len(words), 8, generator=g)
    path.write_text("".join(w + " " + " ".join(f"{x:.6f}" for x in v.tolist()) + "\n"
                            for w, v in zip(words, vecs)))
    return path


@pytest.mark.slow
def test_probe_and_fixed_reference_similarity_are_logged(ray_local, tmp_path):
    from embinit.analysis import align, knn_match_similarity, load_embeddings
    from embinit.sweep import run_sweep
    ref = reference_file(tmp_path / "ref.txt")
    spec = load_spec(spec_data(tmp_path, {"probe": {"n_samples": 300},
                                          "similarity": {"reference": str(ref), "every_n_steps": 5, "k": 3}}))
    result = run_sweep(spec, progress=False)
    assert result.n_finished == 1, result.trials
    uri, (trial,) = result.tracking_uri, result.trials
    run = mlflow_store.client(uri).get_run(trial["run_id"])
    assert trial["key"] == spec.plan()[0].key
    probe = history(uri, trial["run_id"], "probe/pos_acc")
    sim = history(uri, trial["run_id"], "sim/knn_jaccard_mean")
    final = max(sim)
    assert sorted(probe) == [0, final] and final > 5          # at init and after training
    assert {"init/probe/pos_acc", "best/probe/pos_acc", "best/probe/token_acc",
            "sim/knn_jaccard_median"} <= set(run.data.metrics)
    assert run.data.metrics["init/probe/pos_acc"] == probe[0]
    assert all(0.0 <= v <= 1.0 for v in [*probe.values(), *sim.values()])
    assert sorted(sim)[:-1] == list(range(0, final, 5))       # step 0, every 5 steps, the end
    plots = {a.path for a in mlflow_store.client(uri).list_artifacts(trial["run_id"], "plots")}
    assert "plots/similarity_curve.png" in plots
    # the last value is the similarity of the best checkpoint's table to the reference, recomputed here
    ckpt = mlflow_store.client(uri).download_artifacts(trial["run_id"], "checkpoint/best.pt", str(tmp_path))
    mine, theirs = load_embeddings(ckpt), load_embeddings(ref)
    _, a, b = align(mine.tokens, mine.matrix, theirs.tokens, theirs.matrix)
    expected = knn_match_similarity(a, b, k=3).summary["mean"]
    assert sim[final] == pytest.approx(expected, abs=1e-6)


@pytest.mark.slow
def test_reference_seed_compares_with_the_other_seeds_snapshots(ray_local, tmp_path):
    from embinit.analysis import similarity_curve
    from embinit.sweep import run_sweep
    snaps = tmp_path / "snaps"
    # one trial at a time, seed 0 first (plan order), so seed 1 finds seed 0's snapshot of every step
    spec = load_spec(spec_data(tmp_path, {"similarity": {"reference_seed": 0, "snapshot_dir": str(snaps),
                                                         "every_n_steps": 4, "k": 3}},
                               seeds=[0, 1], max_concurrent=1, name="analyses-seeds"))
    result = run_sweep(spec, progress=False)
    assert result.n_finished == 2, result.trials
    by_seed = {t["config"]["seed"]: t for t in result.trials}
    uri = result.tracking_uri
    assert history(uri, by_seed[0]["run_id"], "sim/knn_jaccard_mean") == {}   # the reference itself
    logged = history(uri, by_seed[1]["run_id"], "sim/knn_jaccard_mean")
    curve = similarity_curve(snaps / by_seed[0]["key"], snaps / by_seed[1]["key"], k=3)
    assert len(curve) >= 3 and curve[0]["step"] == 0
    assert logged == pytest.approx({c["step"]: c["mean"] for c in curve}, abs=1e-6)
    assert settings_tags(uri, by_seed) == {0: SETTINGS | {"reference": "reference_seed 0 (this run is the reference)"},
                                           1: SETTINGS}
    # the same trials under a spec with another K: reused as they are, with the settings they ran with;
    # a seed added then trains, and cannot compare with the reused reference's K=3 snapshots: its run says
    # which steps it did not compare and why, and the trial is not failed for it
    again = run_sweep(load_spec(spec_data(tmp_path, {"similarity": {"reference_seed": 0, "snapshot_dir": str(snaps),
                                                                    "every_n_steps": 4, "k": 5}},
                                          seeds=[0, 1, 2], max_concurrent=1, name="analyses-seeds")), progress=False)
    assert again.reused == 2 and again.n_finished == 3, again.trials
    assert {t["run_id"] for t in result.trials} < {t["run_id"] for t in again.trials}
    assert settings_tags(uri, by_seed)[1] == SETTINGS   # every step compared: no not_compared tag
    (new,) = [t for t in again.trials if t["config"]["seed"] == 2]
    assert history(uri, new["run_id"], "sim/knn_jaccard_mean") == {}
    tags = settings_tags(uri, {2: new})[2]
    assert tags["k"] == "5" and tags["not_compared"].startswith("steps 0, 4, ")
    assert tags["not_compared"].endswith(": the reference's snapshots were written under other settings ("
                                         f"{snaps / by_seed[0]['key'] / 'knn_step00000000.pt'} holds K=3 dot "
                                         "neighbours; K=5 dot was asked)"), tags


SETTINGS = {"k": "3", "neighbours": "dot", "scores": "jaccard", "every_n_steps": "4", "reference": "reference_seed 0"}


def settings_tags(uri: str, by_seed: dict) -> dict[int, dict[str, str]]:
    """seed -> the similarity settings its trial run recorded (`embinit.similarity.*` tags)."""
    from embinit.tracking import records
    return {seed: records.from_run(mlflow_store.client(uri).get_run(t["run_id"])).similarity
            for seed, t in by_seed.items()}


def test_reference_seed_similarity_in_a_fused_group(ray_local, tmp_path):
    """`execution: {fuse: auto}`: both seeds train as one fused group; the other seed's curve is still
    the one its snapshots and the reference's give, step by step, logged and plotted in its own run."""
    from embinit.tracking import records
    from embinit.analysis import similarity_curve
    from embinit.sweep import run_sweep
    snaps = tmp_path / "snaps"
    spec = load_spec(spec_data(tmp_path, {"similarity": {"reference_seed": 0, "snapshot_dir": str(snaps),
                                                         "every_n_steps": 4, "k": 3}},
                               seeds=[0, 1], name="analyses-fused", execution={"fuse": "always"},
                               max_concurrent=1))   # one slot: the two seeds fuse (else each gets one)
    result = run_sweep(spec, progress=False)
    assert result.n_finished == 2, result.trials
    by_seed = {t["config"]["seed"]: t for t in result.trials}
    uri = result.tracking_uri
    client = mlflow_store.client(uri)
    assert {client.get_run(t["run_id"]).data.tags[records.EXECUTION_TAG] for t in result.trials} == {"fused"}
    assert history(uri, by_seed[0]["run_id"], "sim/knn_jaccard_mean") == {}   # the reference itself
    logged = history(uri, by_seed[1]["run_id"], "sim/knn_jaccard_mean")
    curve = similarity_curve(snaps / by_seed[0]["key"], snaps / by_seed[1]["key"], k=3)
    assert len(curve) >= 3 and curve[0]["step"] == 0
    assert logged == pytest.approx({c["step"]: c["mean"] for c in curve}, abs=1e-6)
    plots = {a.path for a in client.list_artifacts(by_seed[1]["run_id"], "plots")}
    assert "plots/similarity_curve.png" in plots
    assert settings_tags(uri, by_seed) == {0: SETTINGS | {"reference": "reference_seed 0 (this run is the reference)"},
                                           1: SETTINGS}


def test_blog_configs_track_similarity_between_embedding_seeds(monkeypatch, tmp_path):
    """Since issue 23 the blog specs compare two trials that share the trial seed and differ only in
    `emb_seed` (tests/test_emb_seed.py holds the rest)."""
    monkeypatch.setenv("EMBINIT_ASSETS", str(tmp_path))  # exp. 2 names exp. 1's checkpoint there
    root = Path(__file__).resolve().parents[1] / "tune_configs" / "blog"
    for path in sorted(root.glob("*.yaml")):
        sim = load_spec(path).analyses.similarity
        assert sim.reference_emb_seed is not None and sim.k == 10 and sim.every_n_steps == 500, path.name
