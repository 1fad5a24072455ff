"""`embinit reproduction --inputs paper`: the paper's own experiments (tune_configs/paper/) beside the
paper's numbers, every Table-1 block transcribed in embinit.paper."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from embinit import paper
from embinit.cli import main
from embinit.reproduction.inputs import PAPER_INPUTS, PRESETS, choose_inputs
from embinit.tracking import mlflow_store, trial_run

ROOT = Path(__file__).resolve().parent.parent
TABLE1_SPECS = sorted(p for p in (ROOT / "tune_configs" / "paper").glob("*.yaml")
                      if not p.name.startswith(("figure1", "table3")))


def test_the_paper_preset_has_one_group_per_table1_spec():
    assert len(TABLE1_SPECS) == 12 and len(PAPER_INPUTS.groups) == 12
    by_spec = {g.spec: g for g in PAPER_INPUTS.groups}
    assert set(by_spec) == {str(p.relative_to(ROOT)) for p in TABLE1_SPECS}
    for path in TABLE1_SPECS:
        spec, g = yaml.safe_load(path.read_text()), by_spec[str(path.relative_to(ROOT))]
        assert g.experiment == (spec.get("mlflow") or {}).get("experiment", spec["name"])
        assert g.task == spec["tasks"][0]["task"]
    assert {(g.task, g.paper_source) for g in PAPER_INPUTS.groups} == set(paper.TABLE1)
    # Table 3 reads its cells from the Multi30k GloVe group: the ablation spec records there
    ablation = yaml.safe_load((ROOT / PAPER_INPUTS.ablation_spec).read_text())
    assert ablation["mlflow"]["experiment"] == "paper-multi30k-glove"


def test_every_table1_block_has_the_papers_settings_and_table2():
    assert set(paper.SETTINGS) == set(paper.TABLE1) == set(paper.TABLE2)
    assert all(len(paper.TABLE1[k]) in (3, 5) for k in paper.TABLE1)


def test_spot_checks_against_the_papers_text():
    """Numbers read off the paper (Tables 1, 2, 5, 7, 8), hard-coded here."""
    assert paper.TABLE1[("iwslt2017", "T5")]["P"] == (15.7, 0.2, 19.3)
    assert paper.TABLE1[("iwslt2017", "T5")]["Xavier_P"] == (12.0, 0.7, 19.5)       # Table 7
    assert paper.TABLE1[("mnli", "BERT")]["P"] == (66.3, 0.6, 4.3)                  # matched, not 66.8
    assert paper.TABLE1_MISMATCHED[("mnli", "BERT")]["P"] == (66.8, 0.6, 5.0)       # its mismatched
    assert paper.TABLE1_MISMATCHED[("mnli", "GloVe")]["P"] == (58.2, 1.2, 7.5)
    assert paper.TABLE1_MISMATCHED[("mnli", "T5")]["Xavier_P"] == (51.0, 0.5, 8.7)  # Table 7
    assert {k: set(v) for k, v in paper.TABLE1_MISMATCHED.items()} == {
        k: set(v) for k, v in paper.TABLE1.items() if k[0] == "mnli"}
    assert paper.TABLE1[("mnli", "GloVe")]["P_Xavier"] == (60.9, 0.0, 4.0)
    assert paper.TABLE1[("multi30k", "T5")]["P_Xavier"] == (44.9, 0.6, 8.3)
    assert paper.TABLE1[("sst2", "T5")]["P_Shuffled"] == (77.6, 1.0, 4.2)
    assert "P_Shuffled" not in paper.TABLE1[("iwslt2017", "GloVe")]               # not printed
    assert paper.TABLE2[("mnli", "T5")]["P"] == (-792.0, 332.0, 0.12, 23.0)
    assert paper.TABLE2[("iwslt2017", "BERT")]["Xavier_P"] == (-0.09, 0.07, -0.01, 0.05)  # Table 8
    assert paper.SETTINGS[("iwslt2017", "T5")]["batch_size"] == 112
    assert paper.SETTINGS[("mnli", "T5")]["d_model"] == 512 and paper.SETTINGS[("mnli", "GloVe")]["epochs"] == 9
    assert paper.SETTINGS[("iwslt2017", "GloVe")]["vocab"] == "27k de / 20k en (min freq 5)"


def _t5_trial(uri, exp, label, seed, acc):
    cfg = {"task": "sst2", "init": label.lower(), "seed": seed, "d_model": 512, "heads": 8, "epochs": 5,
           "layers": 3, "batch_size": 128, "lr": 1e-4, "train_embeddings": True, "pos_encoding": True,
           **({"pretrained": "t5-small"} if label != "Xavier" else {})}   # the family's default, as planned
    run = trial_run.TrialRun.open(uri, exp, None, cfg, f"{label}{seed}", label, {"axes": {}, "point": {}})
    run.finish({"status": "finished", "history": [{"epoch": 1, "val/loss": 0.4}], "test": {},
                "best": {"val/acc": acc, "val/loss": 0.4}, "best_epoch": 2,
                "emb_stats_init": {"emb/min": -1.0, "emb/max": 1.0, "emb/mean": 0.0, "emb/std": 0.5,
                                   "emb/rows": 100.0}}, [])


@pytest.mark.slow
def test_a_paper_store_with_one_block_renders_it_beside_the_paper(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    # a store without the paper's experiments: a clear error naming them
    mlflow_store.ensure_experiment("other", uri)
    assert main(["reproduction", "--tracking-uri", uri, "--inputs", "paper"]) == 2
    assert "paper-sst2-t5" in capsys.readouterr().err
    exp = mlflow_store.ensure_experiment("paper-sst2-t5", uri)
    for label, acc in (("Xavier", 0.81), ("T5", 0.82), ("T5_Xavier", 0.80)):
        for seed in range(3):
            _t5_trial(uri, exp, label, seed, acc + seed / 100)
    assert choose_inputs("paper", uri) == "paper" and "paper" in PRESETS
    # auto never picks the paper preset; it points to it
    assert main(["reproduction", "--tracking-uri", uri]) == 2
    assert "use --inputs paper" in capsys.readouterr().err
    out = tmp_path / "repro.md"
    assert main(["reproduction", "--tracking-uri", uri, "--inputs", "paper", "--out", str(out)]) == 0
    text = out.read_text()
    assert "--inputs paper" in text and "**sst2, T5 (paper: T5)" in text
    assert "| T5 | 82.0 (0.6) | 3.6 |" in text and "| Xavier | 81.4 (0.5) | 1.4 |" in text
    assert "no trials in `paper-iwslt2017-mt5` yet" in text
    # the source the paper names by family and D, run as the paper spec's hub model: not flagged
    assert "| sst2 / T5 | source | T5 (D=512) | t5-small |" in text
    assert "| sst2 / T5 | seeds | 5 | 3 **(differs)** |" in text
    assert "Not in this MLflow store yet" in text        # the studies beyond the paper
