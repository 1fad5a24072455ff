"""tune_configs/offline/table4_dimension.py: Table 4's ratio sweep on a Hugging Face model's whole-word rows,
at its own dimension and on its leading principal components."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from tests.helpers.analogy import QUESTIONS, VECS

TOOL = Path(__file__).resolve().parents[1] / "tune_configs" / "offline" / "table4_dimension.py"
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def tool():
    spec = importlib.util.spec_from_file_location("table4_dimension", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def analogy_bert(tmp_path_factory):
    """A BERT folder whose input rows are the hand-made analogy space (tests.helpers.analogy), plus
    specials and a `##` piece that are no whole word."""
    from transformers import BertConfig, BertModel, BertTokenizerFast
    folder = tmp_path_factory.mktemp("analogy-bert")
    words = SPECIALS + list(VECS) + ["##ly"]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n")
    tok = BertTokenizerFast(vocab=str(folder / "vocab.txt"))   # transformers 5 ignores a `vocab_file`...
    if len(tok.get_vocab()) != len(words):
        tok = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))   # ... which transformers 4 reads
    tok.save_pretrained(folder)
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=len(words), hidden_size=6, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=8))
    with torch.no_grad():
        for i, w in enumerate(words):
            if w in VECS:
                model.embeddings.word_embeddings.weight[i] = torch.tensor(VECS[w], dtype=torch.float32)
    model.save_pretrained(folder)
    return folder


@pytest.mark.slow   # imports transformers
def test_the_sweep_at_both_dimensions(analogy_bert, tmp_path, capsys):
    questions = tmp_path / "questions.txt"
    questions.write_text(QUESTIONS)
    out = tmp_path / "result.json"
    result = tool().main([str(analogy_bert), str(questions), "--dims", "2", "--seeds", "0", "1",
                          "--out", str(out)])
    assert json.loads(out.read_text()) == result
    full, low = result["tables"]
    # the whole words only: no special, no ## piece
    assert (full["dims"], full["words"], low["dims"], low["words"]) == (6, len(VECS), 2, len(VECS))
    assert (full["raw"], full["applicable"]) == (100.0, 6)   # the hand-made space answers all 6
    by_ratio = {r["ratio"]: r for r in full["ratios"]}
    assert len(by_ratio[0.5]["accuracy"]) == 2 and by_ratio[30.0]["mean"] == 100.0   # PE at 1/30: no effect
    assert by_ratio[0.03]["mean"] < 50.0   # the encodings, 33 times the words' spread, drown them
    assert [r["ratio"] for r in low["ratios"]] == list(by_ratio) and low["applicable"] == 6
    text = capsys.readouterr().out
    assert "D=6" in text and "D=2" in text and f"{len(VECS)} words, 6 applicable analogies" in text


def test_top_components_keep_the_leading_directions_and_the_spread():
    torch.manual_seed(0)
    x = torch.randn(200, 3).double() @ torch.diag(torch.tensor([5.0, 2.0, 0.1], dtype=torch.float64))
    x = torch.cat([x, torch.zeros(200, 1, dtype=torch.float64)], 1) + 3.0
    low = tool().top_components(x, 2)
    assert low.shape == (200, 2) and torch.linalg.matrix_rank(low) == 2
    assert low.std().item() == pytest.approx(x.std().item())
    with pytest.raises(SystemExit, match="--dims 5 must be between 1 and 4"):
        tool().top_components(x, 5)
