"""The reproduction's sections beyond the paper (issue 23): the dose-response of the embedding scale and
the OOV rules compared, read from MLflow; paired t intervals as scipy computes them; where the curves
cross; figures and exports; experiments not in the store are shown as not run."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
from scipy import stats

from embinit.tracking import mlflow_store, trial_run
from embinit.reproduction import Group, Inputs, Reproduction, write_exports
from embinit.reproduction.beyond import beyond_sections, sigma_multiple
from embinit.reproduction.beyond_figures import DOSE_METRICS

pytestmark = pytest.mark.slow  # an MLflow SQLite store takes a few seconds to create

SIGMAS = ["0.25x", "1x", "4x"]
# best val. loss per (source, sigma) for seeds 0, 1, 2: GloVe beats GloVe_Shuffled at 0.25x and 1x and
# loses at 4x, so GloVe − GloVe_Shuffled changes sign between 1x and 4x
LOSS = {("GloVe", "0.25x"): [4.0, 4.1, 4.3], ("GloVe", "1x"): [3.8, 3.9, 3.85], ("GloVe", "4x"): [4.6, 4.5, 4.7],
        ("GloVe_Shuffled", "0.25x"): [4.2, 4.4, 4.4], ("GloVe_Shuffled", "1x"): [4.0, 4.05, 4.1],
        ("GloVe_Shuffled", "4x"): [4.3, 4.35, 4.2],
        ("Xavier", "0.25x"): [4.1, 4.2, 4.2], ("Xavier", "1x"): [3.9, 4.0, 4.0], ("Xavier", "4x"): [4.4, 4.4, 4.5]}
OOV = {"xavier": [4.10, 4.12, 4.11], "mean": [4.05, 4.06, 4.08], "mean_cov": [4.11, 4.10, 4.13],
       "focus": [4.00, 4.03, 4.01]}


def _trial(uri, exp, key, label, seed, axes, metrics, oov="xavier"):
    cfg = {"task": "multi30k", "init": label.lower(), "seed": seed, "oov": oov}
    run = trial_run.TrialRun.open(uri, exp, None, cfg, key, label, {"axes": axes, "point": {}})
    run.finish({"status": "finished", "history": [{"epoch": 1, "val/loss": metrics["val/loss"]}],
                "test": {k: v for k, v in metrics.items() if k != "val/loss"},
                "best": {"val/loss": metrics["val/loss"]}, "best_epoch": 1}, [])


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"
    dose = mlflow_store.ensure_experiment("dose", uri)
    for (label, sigma), values in LOSS.items():
        for seed, v in enumerate(values):
            _trial(uri, dose, f"{label}{sigma}{seed}", label, seed, {"sigma": sigma},
                   {"val/loss": v, "test/loss": v + 0.1, "test/bleu": 30 - 5 * v})
    oov = mlflow_store.ensure_experiment("oov", uri)
    for rule, values in OOV.items():
        for seed, v in enumerate(values):
            _trial(uri, oov, f"{rule}{seed}", "GloVe_Xavier", seed, {"oov": rule},
                   {"val/loss": 3.9, "test/bleu": 20.0, "oov/val_loss": v, "oov/val_bleu": 10 - v,
                    "oov/test_loss": v, "oov/test_bleu": 10 - v, "oov/val_sentences": 180.0,
                    "oov/test_sentences": 173.0}, oov=rule)
    inputs = Inputs(groups=(Group("dose", "multi30k", "GloVe", "GloVe", "a.yaml"),), analogy_experiment="none",
                    dose_experiment="dose", oov_experiment="oov")
    rep = SimpleNamespace(uri=uri, inputs=inputs, exports={})
    return uri, inputs, rep, beyond_sections(rep)


def _paired_ci(a, b):
    d = [x - y for x, y in zip(a, b)]
    mean, half = sum(d) / 3, stats.t.ppf(0.975, 2) * stats.tstd(d) / math.sqrt(3)
    return mean, half


def test_dose_table_contrasts_and_crossing(store):
    _, _, _, (dose, _) = store
    text = "\n".join(dose.lines)
    assert "| GloVe | 4.133 (0.153; n=3) | 3.850 (0.050; n=3) | 4.600 (0.100; n=3) |" in text
    mean, half = _paired_ci(LOSS[("GloVe", "4x")], LOSS[("GloVe_Shuffled", "4x")])
    assert (f"σ = 4x: GloVe − GloVe_Shuffled = {mean:.3f} (paired t, 95% CI [{mean - half:.3f}, "
            f"{mean + half:.3f}]; n = 3 vs 3)") in text
    assert "- GloVe − GloVe_Shuffled (changes sign between 1x and 4x):" in text
    assert "dose_response.png" in text and "Scale as run: task multi30k" in text


def test_oov_table_and_differences_against_xavier(store):
    _, _, _, (_, oov) = store
    text = "\n".join(oov.lines)
    assert "180 validation and 173 test pairs" in text
    assert "| val. loss, OOV sentences | 4.110 (0.010; n=3) |" in text
    mean, half = _paired_ci(OOV["focus"], OOV["xavier"])
    assert f"val. loss, OOV sentences: focus − xavier = {mean:.3f} (paired t, 95% CI [{mean - half:.3f}, " in text
    mean, half = _paired_ci(OOV["focus"], OOV["mean"])
    assert f"val. loss, OOV sentences: focus − mean = {mean:.3f} (paired t, 95% CI [{mean - half:.3f}, " in text


def _holm(ps):
    """Holm's step-down adjustment, by hand: the i-th smallest p times (m - i), kept monotone, at most 1."""
    order, out, running = sorted(range(len(ps)), key=ps.__getitem__), [0.0] * len(ps), 0.0
    for i, j in enumerate(order):
        running = max(running, min(1.0, (len(ps) - i) * ps[j]))
        out[j] = running
    return out


def test_oov_differences_carry_p_and_holms_adjustment_over_the_metrics_comparisons(store):
    # five comparisons per metric (three rules against xavier, focus against two more): mean − xavier's
    # interval excludes 0 (p = 0.034) but not after Holm's adjustment over the five
    _, _, _, (_, oov) = store
    lines = [ln for ln in oov.lines if ln.startswith("- val. loss, OOV sentences:")]
    pairs = [("focus", "xavier"), ("mean", "xavier"), ("mean_cov", "xavier"), ("focus", "mean"), ("focus", "mean_cov")]
    ps = [stats.ttest_rel(OOV[a], OOV[b]).pvalue for a, b in pairs]
    holm = _holm(ps)
    assert [ln.split(": ")[1].split(" = ")[0] for ln in lines] == [f"{a} − {b}" for a, b in pairs]
    for line, p, adjusted in zip(lines, ps, holm):
        assert f", p = {p:.3g} (Holm {adjusted:.3g}, m = 5)" in line
    assert lines[0].endswith("**(interval excludes 0)**")                       # Holm 0.0059: holds
    assert lines[1].endswith("**(interval excludes 0)** (not after Holm, m=5)")  # Holm 0.10
    assert "interval excludes 0" not in lines[2]
    assert "Holm's adjustment over the metric's comparisons" in "\n".join(oov.lines)


def test_dose_differences_are_one_holm_family_per_metric(store):
    _, _, _, (dose, _) = store
    rows = [ln for ln in dose.lines if ln.startswith("  - σ = ")]
    assert len(rows) == len(DOSE_METRICS) * 3 * len(SIGMAS)   # each metric, three contrasts, each sigma
    tested = [ln for ln in rows if ", p = " in ln]                # every paired difference with a test
    assert len(tested) == len(rows) and all("m = 9)" in ln for ln in tested)


def test_figures_and_exports(store, tmp_path):
    _, _, rep, _ = store
    paths = write_exports(rep, tmp_path)
    names = {p.name for p in paths}
    assert {"dose_response.png", "oov_rules.png", "dose_response.csv", "oov_rules.csv"} <= names
    assert (tmp_path / "dose_response.png").read_bytes()[:4] == b"\x89PNG"
    exported = json.loads((tmp_path / "reproduction.json").read_text())
    row = next(r for r in exported["dose_response"] if r["source"] == "Xavier" and r["sigma"] == "4x"
               and r["metric"] == "best/val/loss")
    assert row["multiple"] == 4.0 and row["n"] == 3 and row["min"] == 4.4 and row["max"] == 4.5


def test_the_sections_sit_in_the_document_and_say_when_not_run(store):
    uri, inputs, _, _ = store
    titles = [s.title for s in Reproduction(uri, inputs).build()]
    assert titles[-3:-1] == ["Beyond the paper: the embedding scale, a dose–response study (issue 23)",
                             "Beyond the paper: rows the source lacks, the OOV rules compared (issue 23)"]
    rep = SimpleNamespace(uri=uri, inputs=Inputs(dose_experiment="nope", oov_experiment="nope2"), exports={})
    lines = [s.lines for s in beyond_sections(rep)]
    assert lines[0] == ["Not in this MLflow store yet: `embinit run tune_configs/offline/dose_response_sigma.yaml` "
                        "writes it."] and "oov_rules_focus.yaml" in lines[1][0] and rep.exports == {}


def test_sigma_multiples():
    assert sigma_multiple("4x") == 4.0 and sigma_multiple("0.25X") == 0.25
    assert sigma_multiple(0.05) is None and sigma_multiple("absorption:2") is None


def test_a_seed_run_again_under_another_key_counts_by_its_newest_finished_run(tmp_path):
    """The rule every other table counts by (`records.stand_ins`): key A's first run was cut off, key B
    (the spec edited) finished, then A ran again and finished last: A's run stands for seed 0. Before,
    the beyond-the-paper sections kept whichever key came last in the listing (B, whose first run is
    younger than A's first)."""
    import time

    from embinit.reproduction.beyond import _by_seed, _oov_rows
    from embinit.reproduction.inputs import load_trials

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    exp = mlflow_store.ensure_experiment("again", uri)
    cfg = {"task": "multi30k", "init": "glove", "seed": 0, "oov": "mean"}
    trial_run.TrialRun.open(uri, exp, None, cfg, "A", "GloVe", {"axes": {"sigma": "1x"}, "point": {}})  # cut off
    for key, loss in (("B", 2.0), ("A", 1.0)):
        time.sleep(0.02)
        _trial(uri, exp, key, "GloVe", 0, {"sigma": "1x"}, {"val/loss": loss, "oov/val_loss": loss}, oov="mean")
    trials, _ = load_trials("again", uri)
    assert [t.key for t in trials] == ["A", "B"]   # the listing: by each key's oldest run
    finished = [t for t in trials if t.status == "finished"]
    metric = next(m for m in finished[0].metrics if m.endswith("val/loss") and not m.startswith("oov"))
    chosen = _by_seed(finished, metric, label="GloVe", axis=("sigma", "1x"))   # seed -> its run
    assert {seed: (t.key, t.metrics[metric]) for seed, t in chosen.items()} == {0: ("A", 1.0)}
    (row,) = [r for r in _oov_rows(finished) if r["metric"] == "oov/val_loss"]
    assert row["values"] == {0: 1.0} and row["n"] == 1 and row["per_seed"] == {"0": {"value": 1.0,
                                                                                   "run_id": chosen[0].run_id}}
