"""The MLflow UI as a user meets it: a real `mlflow server` on a small store written by embinit.tracking.trial_run,
read in headless Chromium. Trials are rows of the run table (not folded under the sweep's run), their
metrics and params are columns to pick, and "Group by" on the `embinit.cell` tag gives the mean over seeds;
runs read as `<label>-s<seed>` (whole, also when grouped), the sweep's run as the spec's name, the
experiment's description as the spec's; a trial's params are the resolved config (no `None`) with the
report's label as `init` and its model size; its Model-metrics tab, for a trial recorded by the sweep's
own worker code with every metric a real trial logs (`coverage/*`, `sim/*`, `probe/*` included), shows
each kind and keeps the embedding statistics beyond Table 2's in a table artifact; a sweep whose trials
all failed is not a green "Finished".

Screenshots go to $EMBINIT_SCREENSHOTS (docs/screenshots/ is made that way:
`EMBINIT_SCREENSHOTS=docs/screenshots pytest tests/test_mlflow_ui.py`), else a temporary folder.
CI (`.ci/run`) installs Debian's chromium; without it (or without the playwright package) the test skips."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from embinit.commands import runs_page
from embinit.tracking import mlflow_store, records, run_writers, trial_results, trial_run

pytestmark = pytest.mark.slow

# as compose runs it: MLflow 3's job runner (seven polling Huey consumers, about a core while idle) off
SERVER_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _trial(uri, exp, parent, label, init, seed, bleu):
    cfg = {"task": "synthetic_translation", "init": init, "seed": seed}
    run = trial_run.TrialRun.open(uri, exp, parent, cfg, f"{label}{seed}", label, {"axes": {}, "point": {}})
    history = [{"epoch": e, "val/loss": 2.0 / e, "val/bleu": bleu * e / 3} for e in (1, 2, 3)]
    for h in history:
        run.log_epoch(h["epoch"], h)
    stats = {f"emb/{k}": 0.1 * i for i, k in enumerate(trial_results.KEY_EMB_STATS + ("row_norm_mean", "pe_max"))}
    run.finish({"status": "finished", "history": history, "best": {"val/loss": 0.67}, "best_epoch": 3,
                "test": {"test/bleu": bleu}, "emb_stats_init": stats, "emb_stats_best": stats}, [])
    return run.run_id


def _real_trial(root: Path, uri: str) -> tuple[str, str]:
    """(experiment id, run id) of a trial recorded as a sweep's worker records it (`train_unit`, Tune's
    session calls stubbed): the synthetic task with GloVe-format rows (`coverage/*`) and both analyses
    (`probe/*`, `init/probe/*`, `best/probe/*`, `sim/*`), so its run holds every metric a real trial logs."""
    from ray import tune

    from embinit.spec import load_spec
    from embinit.sweep.analyses import shared_settings
    from embinit.sweep.trainable import train_unit
    from embinit.sweep.work import SweepContext, units_to_run
    from embinit.tasks.synthetic import LEXICON
    words = sorted(set(LEXICON.values()))
    vec = root / "glove.txt"
    vec.write_text("".join(f"{w} " + " ".join(f"{(i * 3 + j) % 11 / 10:.1f}" for j in range(16)) + "\n"
                           for i, w in enumerate(words)))
    spec = load_spec({"name": "ui-trial", "tasks": [{"task": "synthetic_translation", "epochs": 3, "heads": 2,
                                                     "ff_dim": 32, "max_train_examples": 128}],
                      "inits": ["glove+standardize"], "seeds": [0], "pretrained": str(vec),
                      "cache_dir": str(root / "cache"), "resources": {"cpus": 1},
                      "analyses": {"probe": {"every_n_epochs": 1, "n_samples": 200},
                                   "similarity": {"every_n_steps": 2, "reference": str(vec)}},
                      "mlflow": {"tracking_uri": uri, "log_checkpoint": False}})
    exp = mlflow_store.ensure_experiment(spec.experiment_name(), uri)
    parent = run_writers.start_parent_run(exp, uri, spec.spec_hash(), spec.to_yaml(), 1, run_name=spec.name)
    shared = SweepContext(uri, exp, parent, log_checkpoint=False, cache_dir=spec.cache_dir,
                          analyses=shared_settings(spec))
    units, _ = units_to_run(spec, set())
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tune, "report", lambda metrics, checkpoint=None: None)
        mp.setattr(tune, "get_checkpoint", lambda: None)
        train_unit({"unit": 0}, shared, units)
    run_writers.end_parent_run(parent, uri, "FINISHED", None, {})
    (run,) = [r for r in mlflow_store.search_runs(exp, uri) if records.KEY_TAG in r.data.tags]
    return exp, run.info.run_id


# The screenshots show real numbers: the quickstart's test BLEU per seed (tune_configs/quickstart.yaml, its
# MEASURED comment: Xavier 99.89, Pretrained 80.42, Pretrained_Xavier 99.92; these per-seed values are
# from a rerun of the quickstart that reproduced those means exactly). Made-up ones (Xavier 90.5 against
# Pretrained_Xavier 40.5) once reversed the quickstart's finding in docs/screenshots/.
QUICKSTART_BLEU = {
    ("Xavier", "xavier", 0): 100.0, ("Xavier", "xavier", 1): 99.6838559038549, ("Xavier", "xavier", 2): 100.0,
    ("Pretrained", "glove", 0): 75.7191963835049, ("Pretrained", "glove", 1): 82.7500909036712,
    ("Pretrained", "glove", 2): 82.7824960669917,
    ("Pretrained_Xavier", "glove+standardize", 0): 99.7637060348767,
    ("Pretrained_Xavier", "glove+standardize", 1): 100.0, ("Pretrained_Xavier", "glove+standardize", 2): 100.0,
}
RUN_NAMES = [f"{label}-s{seed}" for label, _, seed in QUICKSTART_BLEU]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui")
    uri = f"sqlite:///{root}/mlflow.db"
    exp = mlflow_store.ensure_experiment("ui", uri)
    run_writers.describe_experiment(exp, uri, "Pretrained rows vs Xavier on the synthetic task")
    parent = run_writers.start_parent_run(exp, uri, "abc12345", "name: ui\n", len(QUICKSTART_BLEU),
                                          run_name="ui-study")
    ids = [_trial(uri, exp, parent, label, init, seed, bleu) for (label, init, seed), bleu in QUICKSTART_BLEU.items()]
    run_writers.end_parent_run(parent, uri, run_writers.sweep_status(False, len(ids), len(ids)), None, {})
    failed_exp = mlflow_store.ensure_experiment("ui-failed", uri)
    bad_parent = run_writers.start_parent_run(failed_exp, uri, "def67890", "name: ui-failed\n", 1,
                                           run_name="ui-failed")
    bad = trial_run.TrialRun.open(uri, failed_exp, bad_parent, {"task": "synthetic_translation", "seed": 0},
                                 "bad0", "Xavier", {})
    bad.fail("RuntimeError: boom")
    run_writers.end_parent_run(bad_parent, uri, run_writers.sweep_status(False, 0, 1), None, {})
    real_exp, real = _real_trial(root, uri)
    return {"root": root, "uri": uri, "exp": exp, "failed_exp": failed_exp, "trial": ids[0],
            "bad_parent": bad_parent, "real_exp": real_exp, "real": real}


@pytest.fixture(scope="module")
def server(store):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store["uri"],
                             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                            cwd=store["root"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **SERVER_ENV})
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                urllib.request.urlopen(f"{base}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("mlflow server did not start in 120 s")
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (apt-get install -y chromium; .ci/run does it)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    with sync_api.sync_playwright() as p:
        # playwright gives the browser a fresh temporary --user-data-dir of its own
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, server):
    """A fresh context per test: the UI keeps view state (Group by, columns) in local storage."""
    context = browser.new_context(viewport={"width": 1600, "height": 900})
    yield context.new_page()
    context.close()


def _shots() -> Path:
    out = Path(os.environ.get("EMBINIT_SCREENSHOTS") or Path(os.environ.get("TMPDIR", "/tmp")) / "embinit-ui")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _open(page, url: str, text: str) -> None:
    """Go to `url`, wait for `text`, and close MLflow's assistant panel if it is open (it hides columns)."""
    page.goto(url)
    page.get_by_text(text, exact=True).first.wait_for(timeout=60_000)
    close = page.get_by_role("button", name="Close")
    if close.count():
        close.last.click()


def _table(page, header: str) -> dict[str, str]:
    """The first two columns of the table (role=table) whose first header cell is `header`, as a dict."""
    rows = page.evaluate("""header => {
        for (const t of document.querySelectorAll('[role=table]')) {
            const rows = Array.from(t.querySelectorAll('[role=row]')).map(
                r => Array.from(r.querySelectorAll('[role=cell], [role=columnheader]')).map(c => c.innerText.trim()));
            if (rows.length && rows[0][0] === header) return rows.slice(1);
        }
        return null;
    }""", header)
    assert rows is not None, f"no table headed {header!r} on {page.url}"
    return {r[0]: r[1] for r in rows if len(r) >= 2}


def test_trials_are_rows_of_the_run_table(page, server, store):
    # the address `embinit run` prints and the API's mlflow.url (the bare #/experiments/ID opens MLflow
    # 3.17's GenAI overview); the sweep's row is named after the spec and its number in the experiment
    _open(page, runs_page(server, store['exp']), "ui-study #1")
    for name in RUN_NAMES:
        page.get_by_text(name, exact=True).first.wait_for(timeout=60_000)  # visible without expanding
    # the spec's description is the experiment's
    page.get_by_text("Pretrained rows vs Xavier on the synthetic task", exact=True).first.wait_for(timeout=30_000)
    page.screenshot(path=str(_shots() / "runs-table.png"))


def _clipped_run_names(page) -> dict[str, bool]:
    """Each trial row's name in the run table -> whether the table cuts it short (an ellipsis)."""
    cells = page.evaluate("""() => Array.from(document.querySelectorAll(
        '[role=gridcell][col-id="attributes.`Run Name`"]')).map(c => [c.innerText.trim(),
        Array.from(c.querySelectorAll('*')).some(e => e.scrollWidth > e.clientWidth + 1)])""")
    return {name: clipped for name, clipped in cells if "\n" not in name and name != "Additional runs"}


def test_group_by_init_shows_the_mean_over_seeds(page, server, store):
    _open(page, f"{server}/#/experiments/{store['exp']}/runs", "ui-study #1")
    page.get_by_role("button", name="Columns", exact=True).click()
    for name in ("test/bleu", "seed"):  # the trials' metrics and params are columns to pick
        page.get_by_role("dialog").get_by_text(name, exact=True).click()
    page.keyboard.press("Escape")
    headers = page.locator("[role=columnheader]").all_inner_texts()
    assert "test/bleu" in headers and "seed" in headers
    page.get_by_role("button", name="Group by").click()
    page.get_by_role("menu").get_by_text("embinit.cell", exact=True).click()
    page.keyboard.press("Escape")
    # one group per cell (init and task; no axes or search here), three seeds each, and the mean of
    # test/bleu over the seeds: the quickstart's (99.89, 80.42, 99.92; the UI shows the unrounded mean)
    for group, mean in (("Xavier", r"99\.89"), ("Pretrained", r"80\.41"), ("Pretrained_Xavier", r"99\.92")):
        page.get_by_text(f"Group: {group} (synthetic_translation)", exact=True).first.wait_for(timeout=30_000)
        page.get_by_text(re.compile(mean + r"\d* \(average\)")).first.wait_for(timeout=30_000)
    # the grouped rows read as label and seed, whole (not `synthetic_translation-Pre…`)
    assert _clipped_run_names(page) == {name: False for name in RUN_NAMES}
    page.screenshot(path=str(_shots() / "runs-grouped-by-init.png"))


def test_params_are_the_resolved_config(page, server, store):
    _open(page, f"{server}/#/experiments/{store['exp']}/runs/{store['trial']}", "Parameter")
    page.get_by_text("task", exact=True).first.wait_for(timeout=30_000)
    params = _table(page, "Parameter")
    # task defaults filled in (synthetic_translation: 5 epochs, batch 32, lr 1e-3); unset options left out
    assert (params.get("epochs"), params.get("batch_size"), params.get("lr")) == ("5", "32", "0.001"), params
    assert params["task"] == "synthetic_translation", params
    assert (params["init"], params["init_spec"]) == ("Xavier", "xavier"), params  # the report's label
    assert "None" not in params.values() and "data_dir" not in params, params
    page.get_by_text("batch_size", exact=True).first.scroll_into_view_if_needed()
    page.screenshot(path=str(_shots() / "trial-overview.png"))


def test_a_real_trial_shows_its_model_size_and_no_empty_checkpoint_tag(page, server, store):
    _open(page, f"{server}/#/experiments/{store['real_exp']}/runs/{store['real']}", "Parameter")
    page.get_by_text("model_parameters", exact=True).first.wait_for(timeout=30_000)
    params = _table(page, "Parameter")
    assert int(params["model_parameters"]) == int(params["trainable_parameters"]) > 0, params
    assert (params["init"], params["init_spec"]) == ("GloVe_Xavier", "glove+standardize"), params
    tags = page.inner_text("body")
    assert "embinit.trial_key" in tags and "embinit.checkpoint_epoch" not in tags, tags


def _chart_sections(page) -> dict[str, int]:
    """The model-metrics view's sections, in page order: title -> its chart count."""
    page.wait_for_timeout(2000)  # the chart sections render one after another
    return {t: int(n) for t, n in re.findall(r"^(\S+)\n\((\d+)\)$", page.inner_text("body"), re.M)}


def test_model_metrics_show_every_kind_a_real_trial_logs(page, server, store):
    _open(page, f"{server}/#/experiments/{store['real_exp']}/runs/{store['real']}/model-metrics", "init/emb")
    sections = _chart_sections(page)
    # the curves (per epoch; analyses per optimizer step) and the one-value results of a real trial
    assert {"train", "val", "sim", "probe", "test", "best/val", "coverage/tgt", "init/emb"} <= set(sections), sections
    assert sections["init/emb"] == len(trial_results.KEY_EMB_STATS), sections
    text = page.inner_text("body")
    assert "row_norm_mean" not in text and "best/emb" not in text  # the rest is in emb_stats.json
    page.screenshot(path=str(_shots() / "trial-metrics.png"))


@pytest.mark.xfail(strict=True, reason="MLflow sorts a run's chart sections by name (the part of a metric key "
                   "before its last '/'), unprefixed keys last, so best/*, coverage/*, init/* come before "
                   "train/* and val/*; putting the curves first needs other metric names (see docs/architecture.md)")
def test_model_metrics_show_the_curves_first(page, server, store):
    _open(page, f"{server}/#/experiments/{store['real_exp']}/runs/{store['real']}/model-metrics", "init/emb")
    assert next(iter(_chart_sections(page))) in ("train", "val")


def test_embedding_statistics_are_a_table_artifact(page, server, store):
    _open(page, f"{server}/#/experiments/{store['exp']}/runs/{store['trial']}/artifacts/emb_stats.json",
          "emb/row_norm_mean")
    stats = _table(page, "statistic")
    assert {"emb/row_norm_mean", "emb/pe_max", "emb/std"} <= set(stats), stats
    assert stats["emb/min"] == "0.1", stats  # the `init` column
    page.screenshot(path=str(_shots() / "trial-emb-stats.png"))


def _green_status_icons(page) -> list[bool]:
    """For each row of the run table: is its status icon (beside the creation time) green, i.e. finished?"""
    page.locator("[role=gridcell][col-id=runDateAndNestInfo] [role=img]").first.wait_for(timeout=60_000)
    colors = page.evaluate("""() => Array.from(document.querySelectorAll(
        '[role=gridcell][col-id=runDateAndNestInfo] [role=img]')).map(e => getComputedStyle(e).color)""")
    rgb = [tuple(int(x) for x in re.findall(r"\d+", c)[:3]) for c in colors]
    return [g > r and g > b for r, g, b in rgb]


def test_an_all_failed_sweep_is_not_finished(page, server, store):
    _open(page, f"{server}/#/experiments/{store['exp']}/runs", "ui-study #1")
    assert _green_status_icons(page) == [True] * (1 + len(RUN_NAMES))  # the finished sweep and its trials: green
    _open(page, f"{server}/#/experiments/{store['failed_exp']}/runs", "ui-failed")
    assert _green_status_icons(page) == [False, False]  # its failed trial and the sweep itself: not green
    _open(page, f"{server}/#/experiments/{store['failed_exp']}/runs/{store['bad_parent']}", "Failed")
    assert "Finished" not in page.inner_text("body")
    page.screenshot(path=str(_shots() / "failed-sweep.png"))
