"""What one trial's MLflow run says of the code, inputs and model behind it (review provenance.md,
findings 1-4 and 6): the label of the init on the target side, the params of the model as trained (d_model
and heads resolved against the pretrained source's D, precision as resolved), the digests its key holds
of its file inputs, where its data came from, the library versions, and the commit of the code the
worker ran, kept per attempt. Real MLflow on a temporary SQLite store; one small trained trial, no Ray."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from embinit import file_inputs
from embinit.tracking import mlflow_store, provenance, records, trial_run
from embinit.config import TrialConfig
from embinit.tasks.synthetic import LEXICON

pytestmark = pytest.mark.slow  # creating an MLflow SQLite store takes a few seconds

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('prov')}/mlflow.db"
    return uri, mlflow_store.ensure_experiment("prov", uri)


def vectors(path: Path, dim: int) -> str:
    """GloVe-style text vectors of every target-side word of the synthetic translation task."""
    words = sorted(set(LEXICON.values()))
    path.write_text("".join(f"{w} " + " ".join(f"{(i + j) % 7 / 10:.1f}" for j in range(dim)) + "\n"
                            for i, w in enumerate(words)))
    return str(path)


def tags(uri: str, run_id: str) -> dict[str, str]:
    return mlflow_store.client(uri).get_run(run_id).data.tags


class TrainStart:
    """The sweep's reporter at train start only (its epoch end reports to Ray Tune)."""

    def __init__(self, run):
        from embinit.sweep.reporting import TrialReporter
        self.on_train_start = TrialReporter(run, claim=None, selection="val/loss", mode="min").on_train_start


def test_a_trained_translation_trial_records_its_target_init_and_the_model_it_trained(store, tmp_path):
    """GloVe on the target side, Xavier on the source; d_model and heads left to the 6-d vectors (the
    task's 4 heads do not divide 6: 3), precision `auto`. The spec's label and the trainer's agree,
    and the params are the trained model's, not the plan's (which had heads 4, no d_model, `auto`)."""
    from embinit.spec import load_spec
    from embinit.train import run_trial
    from helpers.sweep import sweep_spec_data
    uri, exp = store
    task = {"task": "synthetic_translation", "epochs": 1, "max_train_examples": 64, "ff_dim": 16,
            "precision": "auto", "extras": {"val_bleu": False}}
    spec = load_spec(sweep_spec_data("prov", tmp_path, task, inits=[{"tgt": "glove", "src": "xavier"}],
                                     pretrained=vectors(tmp_path / "glove.txt", 6)))
    (planned,) = spec.plan()
    assert planned.label == "GloVe" and planned.config["heads"] is None
    run = trial_run.TrialRun.open(uri, exp, None, planned.config, planned.key, planned.label, {})
    result = run_trial(TrialConfig.from_dict(planned.config), callbacks=[TrainStart(run)],
                       cache_dir=tmp_path / "cache")
    assert (result.label, result.src_label) == ("GloVe", "Xavier")     # the target table's init, by side
    run.finish(result.to_dict(), [])
    got = mlflow_store.client(uri).get_run(run.run_id).data
    assert got.tags[records.TRAINER_LABEL_TAG] == planned.label == "GloVe"
    assert (got.params["d_model"], got.params["heads"]) == ("6", "3")
    # the size the report compares rows by: the trained one, where the config tag has d_model None
    assert records.from_run(mlflow_store.client(uri).get_run(run.run_id)).model_size == {"d_model": 6, "heads": 3}
    assert got.params["precision"] == result.config["precision"] in ("fp32", "bf16")
    assert got.params["init"] == "GloVe" and got.params["init_spec"] == "glove"
    assert got.tags[records.DEVICE_TAG] == "cpu" and got.tags[records.DATA_SOURCE_TAG] == "generated"
    digest = hashlib.sha256((tmp_path / "glove.txt").read_bytes()).hexdigest()
    assert got.tags[records.SHA256_TAG + "pretrained"] == digest


def test_the_train_start_batch_names_the_library_versions(store):
    import numpy
    import torch
    uri, exp = store
    run = trial_run.TrialRun.open(uri, exp, None, {"task": "synthetic_lm", "seed": 1}, "k-versions", "Xavier", {})
    run.log_train_start(TrialConfig("synthetic_lm"), torch.nn.Linear(2, 2), "cpu")
    versions = json.loads(tags(uri, run.run_id)[records.VERSIONS_TAG])
    assert {"python", "torch", "numpy", "sacrebleu", "mlflow", "embinit"} <= set(versions)
    assert versions["torch"] == torch.__version__ and versions["numpy"] == numpy.__version__
    assert set(versions) <= {"python", "torch", "numpy", "sacrebleu", "spacy", "mlflow", "embinit"}


def test_a_run_resumed_with_other_threads_says_where_each_attempt_trained(store):
    """Threads are not in the key, but a run resumed with more of them computes other numbers than either
    count from scratch: the run keeps every change of device or thread count, in order."""
    import torch
    uri, exp = store
    cfg = TrialConfig("synthetic_lm")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        run = trial_run.TrialRun.open(uri, exp, "sweep-a", cfg.to_dict(), "k-threads", "Xavier", {})
        run.log_train_start(cfg, torch.nn.Linear(2, 2), "cpu")
        assert tags(uri, run.run_id)[records.TRAINED_ON_TAG] == "cpu, 1 thread"
        for n in (2, 2):   # resumed with 2 threads, then again with 2: one entry for the change
            torch.set_num_threads(n)
            again = trial_run.TrialRun.open(uri, exp, "sweep-b", cfg.to_dict(), "k-threads", "Xavier", {},
                                            run_id=run.run_id, resumed_epoch=3)
            again.log_train_start(cfg, torch.nn.Linear(2, 2), "cpu")
    finally:
        torch.set_num_threads(threads)
    got = records.from_run(mlflow_store.client(uri).get_run(run.run_id))
    assert got.trained_on == ("cpu, 1 thread", "cpu, 2 threads")


def test_a_trial_that_fails_before_training_logs_only_what_its_plan_knows(store):
    """heads left to the trainer may change with the source's D and `auto` is no precision: a failure
    before training leaves them out, so a retry that trains can log the values it trained with."""
    import torch
    uri, exp = store
    planned = {"task": "synthetic_translation", "seed": 2, "precision": "auto"}
    failed = trial_run.TrialRun.open(uri, exp, "sweep-x", planned, "k-early", "Xavier", {})
    failed.fail("OSError: lost the disk")
    params = mlflow_store.client(uri).get_run(failed.run_id).data.params
    assert not {"heads", "d_model", "precision"} & set(params) and params["layers"] == "1"
    again = trial_run.TrialRun.open(uri, exp, "sweep-x", planned, "k-early", "Xavier", {}, run_id=failed.run_id)
    trained = TrialConfig.from_dict({**planned, "d_model": 18, "heads": 3, "precision": "fp32"}).resolved()
    again.log_train_start(trained, torch.nn.Linear(2, 2), "cpu")
    params = mlflow_store.client(uri).get_run(failed.run_id).data.params
    assert (params["d_model"], params["heads"], params["precision"]) == ("18", "3", "fp32")


def test_file_inputs_are_tagged_with_the_digests_their_key_holds_hashed_once(store, tmp_path, monkeypatch):
    uri, exp = store
    vec = vectors(tmp_path / "vec.txt", 4)
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.en").write_text("a b\n")
    config = TrialConfig("synthetic_translation", init="glove", pretrained=vec, data_dir=str(data)).to_dict()
    reads = []
    real = file_inputs.file_digest
    monkeypatch.setattr(file_inputs, "file_digest", lambda path, *a: reads.append(path) or real(path, *a))
    key = TrialConfig.from_dict(config).key()
    run = trial_run.TrialRun.open(uri, exp, None, config, key, "GloVe", {})
    got = tags(uri, run.run_id)
    assert got[records.SHA256_TAG + "pretrained"] == hashlib.sha256(Path(vec).read_bytes()).hexdigest()
    assert "sha256:" + got[records.SHA256_TAG + "data_dir"] == file_inputs.content_id(str(data))
    assert {k for k in got if k.startswith(records.SHA256_TAG)} == {records.SHA256_TAG + "pretrained",
                                                                    records.SHA256_TAG + "data_dir"}
    assert sorted(map(str, reads)) == sorted([vec, str(data / "train.en")])   # the key's hashing, reused


def _hub_snapshot(cache: Path, kind: str, repo_id: str, commit: str) -> None:
    """What huggingface_hub leaves in its cache for a download: `<kind>s--<org>--<name>/refs/main`."""
    ref = cache / f"{kind}s--{repo_id.replace('/', '--')}" / "refs" / "main"
    ref.parent.mkdir(parents=True)
    ref.write_text(commit)


def test_where_the_data_came_from_is_tagged_when_training_starts(store, tmp_path, monkeypatch):
    """Without a data_dir a worker reads `$EMBINIT_DATA_DIR/<task>` or the hub; the key is the same. A
    hub dataset names the commit of its cached snapshot where the hub cache has one."""
    import torch
    uri, exp = store
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    (tmp_path / "multi30k").mkdir()
    sources = []
    for env in (str(tmp_path), None):
        if env is None:
            monkeypatch.delenv("EMBINIT_DATA_DIR", raising=False)
        else:
            monkeypatch.setenv("EMBINIT_DATA_DIR", env)
        run = trial_run.TrialRun.open(uri, exp, None, {"task": "multi30k", "seed": 0}, f"k-data-{env}", "Xavier", {})
        run.log_train_start(TrialConfig("multi30k", d_model=8, heads=2), torch.nn.Linear(2, 2), "cpu")
        sources.append(tags(uri, run.run_id)[records.DATA_SOURCE_TAG])
    assert sources == [f"local:{tmp_path / 'multi30k'}", "hub:bentrevett/multi30k"]
    _hub_snapshot(tmp_path / "hub", "dataset", "bentrevett/multi30k", "4d" * 20)
    run = trial_run.TrialRun.open(uri, exp, None, {"task": "multi30k", "seed": 0}, "k-data-rev", "Xavier", {})
    run.log_train_start(TrialConfig("multi30k", d_model=8, heads=2), torch.nn.Linear(2, 2), "cpu")
    assert tags(uri, run.run_id)[records.DATA_SOURCE_TAG] == "hub:bentrevett/multi30k@" + "4d" * 20


def test_a_side_read_from_a_hub_id_is_tagged_with_its_snapshot_commit(store, tmp_path, monkeypatch):
    """A key holds a hub id as written, whichever revision the hub served: the run names the commit of
    the cached snapshot each side read (the init family's default id when none is given), and says so
    when there is none; a side read from a local folder or text vectors has no such tag."""
    import torch
    uri, exp = store
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    _hub_snapshot(tmp_path / "hub", "model", "bert-base-uncased", "a1" * 20)
    folder = tmp_path / "local-bert"
    folder.mkdir()

    def hub_tags(key, cfg):
        run = trial_run.TrialRun.open(uri, exp, None, {"task": "multi30k", "seed": 0}, key, "BERT", {})
        run.log_train_start(cfg, torch.nn.Linear(2, 2), "cpu")
        return {k.removeprefix(records.HUB_REVISION_TAG): v for k, v in tags(uri, run.run_id).items()
                if k.startswith(records.HUB_REVISION_TAG)}

    base = dict(task="multi30k", d_model=8, heads=2)
    assert hub_tags("k-hub-1", TrialConfig(init="bert+standardize", src_init="xavier", **base)) == \
        {"pretrained": "bert-base-uncased@" + "a1" * 20}
    assert hub_tags("k-hub-2", TrialConfig(init="xavier", src_init="mbert", **base)) == \
        {"src_pretrained": "bert-base-multilingual-cased@unknown (not in the hub cache)"}
    assert hub_tags("k-hub-3", TrialConfig(init="hf", pretrained=str(folder), **base)) == {}
    assert hub_tags("k-hub-4", TrialConfig(init="glove", pretrained=str(tmp_path / "g.txt"), **base)) == {}


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="not a git checkout")
def test_a_trial_run_names_the_commit_of_every_attempt(store, monkeypatch):
    """The worker's HEAD (MLflow's own tag, the UI's "Version"); a run resumed by other code keeps both."""
    uri, exp = store
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    run = trial_run.TrialRun.open(uri, exp, "sweep-c", {"task": "synthetic_lm", "seed": 3}, "k-commit", "Xavier", {})
    first = tags(uri, run.run_id)
    assert first[records.GIT_COMMIT_TAG] == provenance.git_commit()
    assert first[records.GIT_COMMIT_TAG].removesuffix("-dirty") == head
    assert first[records.GIT_COMMITS_TAG] == first[records.GIT_COMMIT_TAG]
    monkeypatch.setattr(provenance, "process_commit", lambda: "f" * 40)   # a worker of newer code
    trial_run.TrialRun.open(uri, exp, "sweep-c", {"task": "synthetic_lm", "seed": 3}, "k-commit", "Xavier", {})
    trial_run.TrialRun.open(uri, exp, "sweep-c", {"task": "synthetic_lm", "seed": 3}, "k-commit", "Xavier", {})
    again = tags(uri, run.run_id)
    assert again[records.GIT_COMMIT_TAG] == "f" * 40
    assert again[records.GIT_COMMITS_TAG] == f"{first[records.GIT_COMMIT_TAG]},{'f' * 40}"
    monkeypatch.setattr(provenance, "process_commit", lambda: None)     # an installed package
    bare = trial_run.TrialRun.open(uri, exp, None, {"task": "synthetic_lm", "seed": 4}, "k-bare", "Xavier", {})
    assert not {records.GIT_COMMIT_TAG, records.GIT_COMMITS_TAG} & set(tags(uri, bare.run_id))


def test_a_trial_run_names_the_host_and_the_ray_node_of_its_latest_attempt(store, monkeypatch):
    """Any sweep's trial (the CLI's as the service's) says where it ran; outside Ray there is no node, and
    the check never imports Ray."""
    import socket
    import sys
    import types
    uri, exp = store
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    run = trial_run.TrialRun.open(uri, exp, "sweep-h", {"task": "synthetic_lm", "seed": 5}, "k-host", "Xavier", {})
    first = tags(uri, run.run_id)
    assert first[records.HOST_TAG] == socket.gethostname()
    assert records.NODE_TAG not in first and "ray" not in sys.modules
    fake = types.SimpleNamespace(is_initialized=lambda: True,   # a worker of a Ray node at 10.0.0.7
                                 util=types.SimpleNamespace(get_node_ip_address=lambda: "10.0.0.7"))
    monkeypatch.setitem(sys.modules, "ray", fake)
    trial_run.TrialRun.open(uri, exp, "sweep-h", {"task": "synthetic_lm", "seed": 5}, "k-host", "Xavier", {})
    assert tags(uri, run.run_id)[records.NODE_TAG] == "10.0.0.7"   # the resumed attempt's node
    fake.is_initialized = lambda: False                          # imported, not connected: no node
    other = trial_run.TrialRun.open(uri, exp, None, {"task": "synthetic_lm", "seed": 6}, "k-host2", "Xavier", {})
    assert records.NODE_TAG not in tags(uri, other.run_id)


def test_the_commit_is_asked_once_per_process_and_none_outside_a_checkout(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(provenance, "git_commit", lambda: calls.append(1) or "abc")
    provenance.process_commit.cache_clear()
    try:
        assert [provenance.process_commit() for _ in range(3)] == ["abc"] * 3 and calls == [1]
    finally:
        provenance.process_commit.cache_clear()
    monkeypatch.undo()
    monkeypatch.delenv(provenance.SOURCE_COMMIT_ENV, raising=False)
    assert provenance.git_commit(tmp_path) is None
    own = provenance.git_commit()                                  # this checkout's own answer
    monkeypatch.setenv(provenance.SOURCE_COMMIT_ENV, "f1cc137 ")   # a copied tree (the GPU machine's) names it
    assert provenance.git_commit(tmp_path) == "f1cc137"
    assert own and own != "f1cc137" and provenance.git_commit() == "f1cc137"   # named wins over a copied .git
    assert provenance.commits_trained(None, None) is None
    assert provenance.commits_trained("a", None) == "a,unknown"
    assert provenance.commits_trained("a,b", "a") == "a,b"
