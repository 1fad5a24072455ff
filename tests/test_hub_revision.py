"""A hub id pinned to a snapshot, `<id>@<revision>` (embinit.hf_cache): every loader reads that revision
(offline, from the cache), the key holds the pin as written, and the run names the commit it read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.hf_cache import hub_revision, revision_problem, snapshot_text, split_revision
from embinit.init.source_files import hub_ids, resolve_source
from embinit.init.registry import parse_init_spec
from embinit.tasks.tokenization import resolve_tokenizer

OLD, NEW = "a" * 40, "b" * 40
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "movie", "good", "bad", "##s", "un", "##real"]


@pytest.fixture
def hub(tmp_path, monkeypatch) -> Path:
    """A hub cache holding two snapshots of `org/tiny`: OLD (tag v1) with 8-wide embeddings, NEW (main)
    with 16-wide ones."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast
    repo = tmp_path / "hub" / "models--org--tiny"
    for i, commit in enumerate((OLD, NEW)):
        folder = repo / "snapshots" / commit
        folder.mkdir(parents=True)
        (folder / "vocab.txt").write_text("\n".join(WORDS) + "\n")
        tok = BertTokenizerFast(vocab=str(folder / "vocab.txt"))   # transformers 5 ignores a `vocab_file`...
        if len(tok.get_vocab()) != len(WORDS):
            tok = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))   # ... which transformers 4 reads
        tok.save_pretrained(folder)
        torch.manual_seed(i)
        BertModel(BertConfig(vocab_size=len(WORDS), hidden_size=8 * (i + 1), num_hidden_layers=1,
                             num_attention_heads=2, intermediate_size=16)).save_pretrained(folder)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(NEW)
    (repo / "refs" / "v1").write_text(OLD)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_a_pin_is_split_from_its_id_but_a_local_path_never_is(tmp_path):
    assert split_revision("org/tiny@v1") == ("org/tiny", "v1")
    assert split_revision(f"bert-base-uncased@{OLD}") == ("bert-base-uncased", OLD)
    assert split_revision("org/tiny") == ("org/tiny", None)
    folder = tmp_path / "models@2024"
    folder.mkdir()
    assert split_revision(str(folder)) == (str(folder), None)
    assert revision_problem("org/tiny@") and revision_problem("@v1") and revision_problem("org/tiny@v1") is None
    with pytest.raises(EmbinitError, match=r"'org/tiny@': a pinned hub id is <repo id>@<revision>"):
        resolve_source(parse_init_spec("bert"), "org/tiny@")
    with pytest.raises(EmbinitError, match=r"tokenizer 'org/tok@': a pinned hub id"):
        resolve_tokenizer("org/tok@")
    assert resolve_tokenizer("org/tok@v1").source == "org/tok@v1"


def test_the_commit_a_pin_reads_and_how_a_run_says_it(hub):
    assert hub_revision("org/tiny") == NEW and hub_revision("org/tiny@v1") == OLD
    assert hub_revision(f"org/tiny@{OLD}") == OLD and hub_revision(f"org/tiny@{'c' * 40}") is None
    assert hub_revision("org/tiny@v2") is None
    assert snapshot_text("org/tiny") == f"org/tiny@{NEW}"
    assert snapshot_text(f"org/tiny@{OLD}") == f"org/tiny@{OLD}"
    assert snapshot_text("org/tiny@v1") == f"org/tiny@{OLD} (pinned: v1)"
    assert snapshot_text("org/tiny@v2") == "org/tiny@unknown (not in the hub cache) (pinned: v2)"
    assert hub_ids("bert", "org/tiny@v1", tokenizer="org/tok@v3") == {"pretrained": "org/tiny@v1",
                                                                      "tokenizer": "org/tok@v3"}
    assert hub_ids("xavier", None, tokenizer="whitespace") == {}
    assert hub_ids("hf", "org/tiny", tokenizer="auto") == {"pretrained": "org/tiny"}


def test_a_pin_is_in_the_key():
    keys = {TrialConfig("synthetic_classification", init="hf", pretrained=p).key()
            for p in ("org/tiny", "org/tiny@v1", f"org/tiny@{OLD}")}
    assert len(keys) == 3


def _train(hub: Path, out: Path, pretrained: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "EMBINIT_CACHE_DIR": str(out / "cache")}
    return subprocess.run([sys.executable, "-m", "embinit", "train", "--task", "synthetic_classification",
                           "--init", "hf", "--pretrained", pretrained, "--epochs", "1", "--max-train-examples",
                           "64", "--json", "--quiet", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=300)


def test_a_trial_trains_on_the_snapshot_its_pin_names(hub, tmp_path):
    """The model width and the tokenizer come from the pinned snapshot (v1: 8 wide) and not from main
    (16 wide); a revision the offline cache lacks is an error naming the id."""
    widths = {}
    for pretrained in ("org/tiny", "org/tiny@v1", f"org/tiny@{OLD}"):
        done = _train(hub, tmp_path / pretrained.replace("/", "_"), pretrained)
        assert done.returncode == 0, done.stderr[-2000:]
        result = json.loads(done.stdout)
        widths[pretrained] = result["config"]["d_model"]
        assert result["info"]["data"]["tokenizer_source"] == pretrained
    assert widths == {"org/tiny": 16, "org/tiny@v1": 8, f"org/tiny@{OLD}": 8}
    done = _train(hub, tmp_path / "absent", "org/tiny@v2")
    assert done.returncode != 0
    assert "org/tiny@v2" in done.stderr


def _offline(monkeypatch) -> None:
    """HF_HUB_OFFLINE for embinit (read at call time) and for huggingface_hub, which read it at import."""
    import huggingface_hub.constants
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def _spec(pretrained: str, **task) -> dict:
    return {"name": "pin", "tasks": [{"task": "synthetic_classification", **task}],
            "inits": ["xavier", "hf"], "pretrained": {"hf": pretrained}, "seeds": 1}


def test_offline_a_pin_the_cache_lacks_is_named_with_the_revisions_it_holds(hub, monkeypatch):
    """Offline, a revision the cache lacks fails with the revision asked and those the cache holds (not
    transformers' "couldn't connect to huggingface.co", a network it never asked), in the loader, the
    tokenizer and the spec check, which refuses it before anything runs; a commit shortened is named."""
    from embinit.init.hf import load_model_embeddings
    from embinit.spec.full_check import spec_problems
    from embinit.tasks.tokenizer_backends import HfBackend
    _offline(monkeypatch)
    held = f"which holds main = {NEW}; v1 = {OLD}"
    with pytest.raises(EmbinitError) as e:
        load_model_embeddings("org/tiny@v2")
    assert f"revision 'v2' of 'org/tiny' is not in the Hugging Face cache {hub}, {held}; HF_HUB_OFFLINE is set" \
        in str(e.value) and "connect" not in str(e.value)
    with pytest.raises(EmbinitError, match=f"tokenizer 'org/tiny@{OLD[:7]}': revision '{OLD[:7]}' .*{held} "
                                           rf"\(a commit is pinned by all 40 hex digits: did you mean "
                                           f"org/tiny@{OLD}\\?\\)"):
        HfBackend(resolve_tokenizer(f"org/tiny@{OLD[:7]}"))
    assert snapshot_text("org/other@v1") == "org/other@unknown (not in the hub cache) (pinned: v1)"
    _, problems, _ = spec_problems(_spec("org/tiny@v2"))
    assert problems == [("trials synthetic_classification x Pretrained",
                         f"pretrained 'org/tiny@v2': revision 'v2' of 'org/tiny' is not in the Hugging Face cache "
                         f"{hub}, {held}; HF_HUB_OFFLINE is set, so the hub is not asked")]
    _, problems, _ = spec_problems(_spec("org/other", tokenizer="org/other@v1"))
    assert sorted(m for _, m in problems) == [
        f"pretrained 'org/other': 'org/other' is not in the Hugging Face cache {hub} at any revision; "
        f"HF_HUB_OFFLINE is set, so the hub is not asked",
        f"tokenizer 'org/other@v1': 'org/other' is not in the Hugging Face cache {hub} at any revision; "
        f"HF_HUB_OFFLINE is set, so the hub is not asked"]
    assert spec_problems(_spec("org/tiny@v1"))[1] == []


def test_a_cached_snapshot_gives_the_spec_check_its_width(hub, monkeypatch):
    """A d_model that does not fit a hub source's width is refused before any trial where the cache holds
    the snapshot the trials read (a commit pin; offline, any pin), as for a local folder; online, an
    unpinned id is left to the trials (the hub's main may be newer than the cache's)."""
    from embinit.spec.full_check import spec_problems
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    wrong = "the init has dimension 8 but the model's d_model is 16"
    assert [m for _, m in spec_problems(_spec(f"org/tiny@{OLD}", d_model=16))[1]] == [
        f"trials synthetic_classification x Pretrained: {wrong}; set `d_model` to the source's D or leave it out "
        f"(the source's D is used)"]
    assert spec_problems(_spec("org/tiny@v1", d_model=16))[1] == []
    assert spec_problems(_spec(f"org/tiny@{NEW}", d_model=16))[1] == []
    _offline(monkeypatch)
    assert wrong in spec_problems(_spec("org/tiny@v1", d_model=16))[1][0][1]
    assert "dimension 16 but the model's d_model is 8" in spec_problems(_spec("org/tiny", d_model=8))[1][0][1]


def test_the_dry_run_notes_no_cached_tokenizer_as_a_possible_typo(hub, monkeypatch):
    """Its note is for a value that may be a typo of a tokenizer name ('spacey'); a repository the hub
    cache holds is none."""
    from embinit.cli.hub_notes import tokenizer_lines
    from embinit.spec.experiment import ExperimentSpec
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    spec = ExperimentSpec.model_validate({"name": "t", "tasks": ["synthetic_classification"], "inits": ["xavier"],
                                          "seeds": 1, "axes": {"tokenizer": ["org/tiny@v1", "org/other"]}})
    assert [line.split(":")[0] for line in tokenizer_lines(spec.plan())] == ["note"]
    assert "'org/other'" in tokenizer_lines(spec.plan())[0]


def test_the_dry_run_names_each_hub_id_not_pinned_to_a_commit_and_the_pin_it_would_read(hub, monkeypatch):
    from embinit.cli.hub_notes import unpinned_lines
    from embinit.spec.experiment import ExperimentSpec
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    inits = [{"tgt": "hf", "label": f"HF{i}", "pretrained": p}
             for i, p in enumerate(("org/tiny", "org/tiny@v1", f"org/tiny@{OLD}", "org/gone"))]
    spec = ExperimentSpec.model_validate({"name": "t", "tasks": ["synthetic_classification"], "inits": inits,
                                          "seeds": 1})
    lines = unpinned_lines(spec.plan())
    assert [line.split("'")[1] for line in lines] == ["org/gone", "org/tiny", "org/tiny@v1"]
    assert lines[1].endswith(f"it reads org/tiny@{NEW} here now: pin that to keep it")
    assert lines[2].endswith(f"it reads org/tiny@{OLD} here now: pin that to keep it")
    assert lines[0].endswith("which can change with the hub")
