"""Init specs: short and structured forms, and the paper's labels."""

import pytest

from embinit.init import InitSpec, parse_init_spec


@pytest.mark.parametrize("text,label", [
    ("xavier", "Xavier"), ("glove", "GloVe"), ("glove+standardize", "GloVe_Xavier"),
    ("glove+match", "Xavier_GloVe"), ("glove+shuffle", "GloVe_Shuffled"), ("bert", "BERT"),
    ("mbert", "mBERT"), ("t5", "T5"), ("mt5", "mT5"), ("bert+match", "Xavier_BERT"),
    ("t5+shuffle", "T5_Shuffled"), ("mt5+standardize", "mT5_Xavier"), ("mbert+shuffle", "mBERT_Shuffled"),
    ("normal", "Normal"), ("pretrained+standardize", "Pretrained_Xavier"), ("GloVe+Standardize", "GloVe_Xavier"),
])
def test_paper_labels(text, label):
    assert parse_init_spec(text).label == label


def test_structured_and_short_forms_agree():
    short = parse_init_spec("glove+standardize")
    structured = parse_init_spec({"source": "glove", "transform": "standardize"})
    assert short == structured
    assert parse_init_spec({"source": "glove", "transforms": ["standardize"]}) == short
    assert str(short) == "glove+standardize" and short.transform == "standardize"
    full = parse_init_spec({"source": "hf", "transform": "match", "oov": "mean", "lowercase": True,
                            "pretrained": "some/model", "name": "MiniLM"})
    assert full.label == "Xavier_MiniLM" and full.oov == "mean" and full.lowercase
    assert parse_init_spec(full) == full
    assert parse_init_spec(full.to_dict()) == full


def test_transforms_compose_in_order():
    spec = parse_init_spec("glove+shuffle+standardize")
    assert spec.transforms == ("shuffle", "standardize") and spec.label == "GloVe_Shuffled_Xavier"


@pytest.mark.parametrize("text,pretrained,subword", [
    ("xavier", False, False), ("normal", False, False), ("glove", True, False), ("word2vec", True, False),
    ("npy", True, False), ("bert", True, True), ("mt5+shuffle", True, True), ("hf", True, True),
    ("pretrained", True, False),
])
def test_flags(text, pretrained, subword):
    spec = parse_init_spec(text)
    assert spec.is_pretrained is pretrained and spec.is_subword is subword
    assert isinstance(spec, InitSpec)


@pytest.mark.parametrize("spec, named", [
    ("glvoe+standardise", ["'glvoe' is not a registered init", "'standardise' is not a registered transform"]),
    ("glove+standardise+shufle", ["did you mean 'standardize'?", "did you mean 'shuffle'?"]),
    ({"source": "glvoe", "oov": "zro"}, ["did you mean 'glove'?", "'zro' is not a registered oov rule"]),
])
def test_every_wrong_part_of_an_init_is_named_at_once(spec, named):
    """Each misspelt part is said in the one error: the transform was said only once the source was
    fixed, one run later."""
    from embinit.init import InitSpecError
    with pytest.raises(InitSpecError) as e:
        parse_init_spec(spec)
    assert all(part in str(e.value) for part in named), str(e.value)
