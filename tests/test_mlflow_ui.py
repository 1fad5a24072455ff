"""The MLflow UI as a user meets it: a real `mlflow server` on a small store written by embinit.tracking,
read in headless Chromium. Trials are rows of the run table (not folded under the sweep's run), their
metrics and params are columns to pick, and "Group by" on the `embinit.init` tag gives the mean over seeds;
a trial's params are the resolved config (no `None`), its Model-metrics tab holds a few key metrics and the
embedding statistics are a table artifact (not dozens of one-value charts); a sweep whose trials all failed
is not a green "Finished".

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

from embinit import tracking

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _trial(uri, exp, parent, label, init, seed, bleu):
    cfg = {"task": "synthetic_translation", "init": init, "seed": seed}
    run = tracking.TrialRun.open(uri, exp, parent, cfg, f"{label}{seed}", label, {"axes": {}, "point": {}})
    history = [{"epoch": e, "val/loss": 2.0 / e, "val/bleu": bleu * e / 3} for e in (1, 2, 3)]
    for h in history:
        run.log_epoch(h["epoch"], h)
    stats = {f"emb/{k}": 0.1 * i for i, k in enumerate(tracking.KEY_EMB_STATS + ("row_norm_mean", "pe_max"))}
    run.finish({"status": "finished", "history": history, "best": {"val/loss": 0.67}, "best_epoch": 3,
                "test": {"test/bleu": bleu}, "emb_stats_init": stats, "emb_stats_best": stats}, [])
    return run.run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("ui")
    uri = f"sqlite:///{root}/mlflow.db"
    exp = tracking.ensure_experiment("ui", uri)
    parent = tracking.start_parent_run(exp, uri, "abc12345", "name: ui\n", 4)
    ids = [_trial(uri, exp, parent, label, init, seed, bleu + seed)
           for label, init, bleu in (("Xavier", "xavier", 90.0), ("Pretrained", "glove", 40.0)) for seed in (0, 1)]
    tracking.end_parent_run(parent, uri, tracking.sweep_status(False, 4, 4), None, {})
    failed_exp = tracking.ensure_experiment("ui-failed", uri)
    bad_parent = tracking.start_parent_run(failed_exp, uri, "def67890", "name: ui-failed\n", 1)
    bad = tracking.TrialRun.open(uri, failed_exp, bad_parent, {"task": "synthetic_translation", "seed": 0},
                                 "bad0", "Xavier", {})
    bad.fail("RuntimeError: boom")
    tracking.end_parent_run(bad_parent, uri, tracking.sweep_status(False, 0, 1), None, {})
    return {"root": root, "uri": uri, "exp": exp, "failed_exp": failed_exp, "trial": ids[0],
            "bad_parent": bad_parent}


@pytest.fixture(scope="module")
def server(store):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", store["uri"],
                             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                            cwd=store["root"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
    _open(page, f"{server}/#/experiments/{store['exp']}/runs", "sweep-abc12345")
    for name in ("synthetic_translation-Xavier-s0", "synthetic_translation-Xavier-s1",
                 "synthetic_translation-Pretrained-s0", "synthetic_translation-Pretrained-s1"):
        page.get_by_text(name, exact=True).first.wait_for(timeout=60_000)  # visible without expanding
    page.screenshot(path=str(_shots() / "runs-table.png"))


def test_group_by_init_shows_the_mean_over_seeds(page, server, store):
    _open(page, f"{server}/#/experiments/{store['exp']}/runs", "sweep-abc12345")
    page.get_by_role("button", name="Columns", exact=True).click()
    for name in ("test/bleu", "seed"):  # the trials' metrics and params are columns to pick
        page.get_by_role("dialog").get_by_text(name, exact=True).click()
    page.keyboard.press("Escape")
    headers = page.locator("[role=columnheader]").all_inner_texts()
    assert "test/bleu" in headers and "seed" in headers
    page.get_by_role("button", name="Group by").click()
    page.get_by_role("menu").get_by_text("embinit.init", exact=True).click()
    page.keyboard.press("Escape")
    # one group per init, two seeds each, and the mean of test/bleu over the seeds (90, 91 and 40, 41)
    for group, mean in (("Xavier", "90.5"), ("Pretrained", "40.5")):
        page.get_by_text(f"Group: {group}", exact=True).first.wait_for(timeout=30_000)
        page.get_by_text(f"{mean} (average)").first.wait_for(timeout=30_000)
    page.screenshot(path=str(_shots() / "runs-grouped-by-init.png"))


def test_params_are_the_resolved_config(page, server, store):
    _open(page, f"{server}/#/experiments/{store['exp']}/runs/{store['trial']}", "Parameter")
    page.get_by_text("task", exact=True).first.wait_for(timeout=30_000)
    params = _table(page, "Parameter")
    # task defaults filled in (synthetic_translation: 5 epochs, batch 32, lr 1e-3); unset options left out
    assert (params.get("epochs"), params.get("batch_size"), params.get("lr")) == ("5", "32", "0.001"), params
    assert params["task"] == "synthetic_translation" and params["init"] == "xavier", params
    assert "None" not in params.values() and "data_dir" not in params, params
    page.get_by_text("batch_size", exact=True).first.scroll_into_view_if_needed()
    page.screenshot(path=str(_shots() / "trial-overview.png"))


def test_model_metrics_are_a_few_key_metrics(page, server, store):
    _open(page, f"{server}/#/experiments/{store['exp']}/runs/{store['trial']}/model-metrics", "init/emb")
    page.wait_for_timeout(2000)  # the chart sections render one after another
    text = page.inner_text("body")
    sections = dict(re.findall(r"^(\S+)\n\((\d+)\)$", text, re.M))  # a section title, then (its chart count)
    assert sections.get("init/emb") == str(len(tracking.KEY_EMB_STATS)), sections
    assert {"test", "val", "best/val"} <= set(sections), sections
    assert sum(int(n) for n in sections.values()) <= 16, sections  # not the ~70 one-value charts
    assert "row_norm_mean" not in text and "best/emb" not in text  # the rest is in emb_stats.json
    page.screenshot(path=str(_shots() / "trial-metrics.png"))


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
    _open(page, f"{server}/#/experiments/{store['exp']}/runs", "sweep-abc12345")
    assert _green_status_icons(page) == [True] * 5  # the finished sweep and its 4 trials: green
    _open(page, f"{server}/#/experiments/{store['failed_exp']}/runs", "sweep-def67890")
    assert _green_status_icons(page) == [False, False]  # its failed trial and the sweep itself: not green
    _open(page, f"{server}/#/experiments/{store['failed_exp']}/runs/{store['bad_parent']}", "Failed")
    assert "Finished" not in page.inner_text("body")
    page.screenshot(path=str(_shots() / "failed-sweep.png"))
