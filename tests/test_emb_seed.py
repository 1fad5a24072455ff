"""The embedding-only seed (`emb_seed`, issue 23 item 1): the tables' init draws from it, every other
weight, the data order and dropout from the trial seed; and the blog specs use it as the blog's code
does (two models that differ only in their token table's init)."""

from pathlib import Path

import pytest
import torch

from embinit.config import TrialConfig
from embinit.models import embedding_parameters
from embinit.spec import SpecError, load_spec
from embinit.train.prepare import prepare

TINY = dict(task="synthetic_lm", epochs=1, max_train_examples=64, threads=1, dropout=0.3)
BLOG = Path(__file__).resolve().parents[1] / "tune_configs" / "blog"


def _split(model):
    ids = {id(p) for p in embedding_parameters(model)}
    emb = {n: p.detach().clone() for n, p in model.named_parameters() if id(p) in ids}
    body = {n: p.detach().clone() for n, p in model.named_parameters() if id(p) not in ids}
    return emb, body


def _setup(**kw):
    return prepare(TrialConfig(**TINY, **kw), cache_dir=False)


def test_emb_seed_changes_the_tables_only():
    a, b = _setup(seed=4, emb_seed=1), _setup(seed=4, emb_seed=2)
    emb_a, body_a = _split(a.model)
    emb_b, body_b = _split(b.model)
    assert emb_a and body_a.keys() == body_b.keys()
    assert all(torch.equal(body_a[k], body_b[k]) for k in body_a)          # every other weight
    assert all(not torch.equal(emb_a[k], emb_b[k]) for k in emb_a)         # the tables differ
    drops = [torch.rand(8, generator=s.dropout_generator) for s in (a, b)]
    assert torch.equal(*drops)                                             # the dropout stream


def test_the_trial_seed_still_moves_everything_else():
    a, b = _setup(seed=4, emb_seed=1), _setup(seed=5, emb_seed=1)
    emb_a, body_a = _split(a.model)
    emb_b, body_b = _split(b.model)
    assert all(torch.equal(emb_a[k], emb_b[k]) for k in emb_a)
    assert any(not torch.equal(body_a[k], body_b[k]) for k in body_a)


def test_unset_emb_seed_is_the_trial_seed_and_leaves_keys_alone():
    plain, same = _setup(seed=3), _setup(seed=3, emb_seed=3)
    assert all(torch.equal(x, y) for x, y in zip(_split(plain.model)[0].values(), _split(same.model)[0].values()))
    assert TrialConfig(seed=3, **TINY).key() != TrialConfig(seed=3, emb_seed=7, **TINY).key()
    d = TrialConfig(seed=3, **TINY).to_dict()
    d.pop("emb_seed")
    assert TrialConfig(**d).key() == TrialConfig(seed=3, **TINY).key()


def test_emb_seed_is_not_a_member_of_the_fused_groups_key():
    from embinit.sweep.fused import fuse_key
    a = TrialConfig(task="synthetic_translation", seed=1, emb_seed=1).to_dict()
    b = TrialConfig(task="synthetic_translation", seed=1, emb_seed=2).to_dict()
    assert fuse_key(a) == fuse_key(b) is not None


@pytest.mark.parametrize("path", sorted(BLOG.glob("*.yaml")), ids=lambda p: p.name)
def test_blog_specs_vary_only_the_token_table_and_take_the_blog_repos_settings(path, monkeypatch, tmp_path):
    monkeypatch.setenv("EMBINIT_ASSETS", str(tmp_path))
    spec = load_spec(path)
    trials = spec.expand()
    assert len(trials) == 2 and len({t.seed for t in trials}) == 1
    assert len({t.emb_seed for t in trials}) == 2 and all(t.data_seed is None for t in trials)
    # configs/configs.py of ryankish/DoEmbeddingsConverge (83a6a34) and its model.py
    blog = {"d_model": 512, "layers": 6, "heads": 8, "ff_dim": 2048, "max_len": 512, "batch_size": 12,
            "lr": 1e-4, "dropout": 0.2, "pre_ln": True, "tie_embeddings": False, "init": "xavier"}
    for t in trials:
        assert {k: getattr(t, k) for k in blog} == blog, path.name
    sim = spec.analyses.similarity
    assert sim.metric == ["overlap", "jaccard"] and sim.k == 10 and sim.neighbours == "dot"
    assert sim.reference_emb_seed in {t.emb_seed for t in trials} and sim.reference_seed is None


def test_blog_exp2_starts_from_exp1_with_the_posts_seeds(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBINIT_ASSETS", str(tmp_path))
    exp2 = load_spec(BLOG / "blog_exp2_reinit_embeddings.yaml").expand()
    assert {t.emb_seed for t in exp2} == {100, 200} and {t.seed for t in exp2} == {2}
    assert all(t.init_from == str(tmp_path / "blog_exp1_best.pt") and t.freeze_non_embeddings for t in exp2)


def test_the_twin_of_an_emb_seed_is_the_same_trial_at_the_reference_emb_seed(monkeypatch, tmp_path):
    from embinit.analysis import SimilarityCallback
    from embinit.sweep.analyses import shared_settings, trial_callbacks
    monkeypatch.setenv("EMBINIT_ASSETS", str(tmp_path))
    spec = load_spec(BLOG / "blog_exp1_from_scratch.yaml")
    spec = spec.model_copy(update={"cache_dir": str(tmp_path)})
    settings = shared_settings(spec)
    ref, other = sorted(spec.expand(), key=lambda t: t.emb_seed)
    sims = [next(c for c in trial_callbacks(settings, cfg, lambda m, s: None, tmp_path / "o")
                 if isinstance(c, SimilarityCallback)) for cfg in (ref, other)]
    assert sims[0].reference_snapshots is None
    assert sims[1].reference_snapshots == Path(settings["similarity"]["snapshot_dir"]) / ref.key()
    assert sims[1].metrics == ("overlap", "jaccard")


def test_a_reference_emb_seed_no_trial_uses_is_a_spec_error(monkeypatch, tmp_path):
    import yaml
    monkeypatch.setenv("EMBINIT_ASSETS", str(tmp_path))
    data = yaml.safe_load((BLOG / "blog_exp1_from_scratch.yaml").read_text())
    data["analyses"]["similarity"]["reference_emb_seed"] = 9
    with pytest.raises(SpecError) as err:
        load_spec(data)
    assert any(p == "analyses.similarity.reference_emb_seed" and "9" in m for p, m in err.value.problems)


@pytest.mark.slow
def test_a_sweep_compares_embedding_seeds_with_both_scores(ray_local, tmp_path):
    """The blog specs' design end to end on local Ray: one trial seed, two embedding seeds; the second
    compares with the first's snapshots step by step and logs the blog's score beside Jaccard."""
    from embinit.tracking import mlflow_store
    from embinit.analysis import similarity_curve
    from embinit.sweep import run_sweep
    from helpers.sweep import sweep_spec_data
    snaps = tmp_path / "snaps"
    data = sweep_spec_data("emb-seeds", tmp_path, {"task": "synthetic_lm", "epochs": 2, "d_model": 16,
                                                   "ff_dim": 32, "heads": 2, "max_train_examples": 200})
    data.update(seeds=[0], axes={"emb_seed": [1, 2]}, max_concurrent=1,
                analyses={"similarity": {"reference_emb_seed": 1, "snapshot_dir": str(snaps), "every_n_steps": 4,
                                         "k": 3, "metric": ["overlap", "jaccard"]}})
    result = run_sweep(load_spec(data), progress=False)
    assert result.n_finished == 2, result.trials
    by_emb = {t["config"]["emb_seed"]: t for t in result.trials}
    uri = result.tracking_uri

    def history(run_id, metric):
        return {m.step: m.value for m in mlflow_store.client(uri).get_metric_history(run_id, metric)}
    assert history(by_emb[1]["run_id"], "sim/knn_overlap_mean") == {}     # the reference itself
    for score in ("overlap", "jaccard"):
        logged = history(by_emb[2]["run_id"], f"sim/knn_{score}_mean")
        curve = similarity_curve(snaps / by_emb[1]["key"], snaps / by_emb[2]["key"], k=3, metric=score)
        assert len(curve) >= 3 and logged == pytest.approx({c["step"]: c["mean"] for c in curve}, abs=1e-6)
