"""The paper specs name the sources the paper names (issue 23, item 4)."""

from pathlib import Path

import yaml

from embinit.init.registry import OOV_INFO

PAPER = Path(__file__).resolve().parents[1] / "tune_configs" / "paper"


def _glove_files() -> dict[str, str]:
    out = {}
    for path in sorted(PAPER.glob("*.yaml")):
        pretrained = yaml.safe_load(path.read_text()).get("pretrained") or {}
        if isinstance(pretrained, dict) and "glove" in pretrained:
            out[path.name] = pretrained["glove"]
    return out


def test_paper_glove_specs_use_the_840b_file_the_paper_names():
    files = _glove_files()
    assert len(files) >= 6, files   # multi30k, iwslt, sst2, mnli, table 3, figure 1
    wrong = {name: f for name, f in files.items() if not f.endswith("/glove.840B.300d.txt")}
    assert not wrong, f"GloVe files other than the paper's 840B: {wrong}"


def test_no_paper_spec_claims_the_paper_leaves_the_glove_file_unnamed():
    said = [p.name for p in PAPER.glob("*.yaml") if "does not name the file" in p.read_text()]
    assert not said, said


def test_the_default_oov_rule_is_not_credited_to_the_paper():
    text = OOV_INFO["xavier"].description
    assert "paper's behaviour" not in text
    assert "never says how it filled missing rows" in text
