"""BLEU: sacrebleu on detokenized hypotheses, <unk> dropped, case handling, signature."""

from embinit.train.bleu import corpus_bleu, detokenize_all, is_lowercased


def test_unk_and_specials_are_dropped_before_detokenizing():
    hyps = detokenize_all([["a", "<unk>", "dog", "runs", ".", "<eos>"]], lambda t: " ".join(t))
    assert hyps == ["a dog runs ."]


def test_unk_would_cost_bleu_under_13a():
    refs = ["a brown dog runs on the grass ."]
    clean, sig = corpus_bleu(["a dog runs on the grass ."], refs, lowercase=True)
    dirty, _ = corpus_bleu(["a <unk> dog runs on the grass ."], refs, lowercase=True)
    assert dirty < clean and "tok:13a" in sig


def test_case_follows_the_tokenization():
    score_lc, sig_lc = corpus_bleu(["A Dog runs ."], ["a dog runs ."], lowercase=True)
    score_cs, sig_cs = corpus_bleu(["A Dog runs ."], ["a dog runs ."], lowercase=False)
    assert abs(score_lc - 100.0) < 1e-6 and score_cs < 99.0
    assert "case:lc" in sig_lc and "case:mixed" in sig_cs


def test_lowercase_detection():
    assert is_lowercased({"lowercase": False}, ["a"]) is False
    assert is_lowercased({}, ["<pad>", "<unk>", "a", "dog"]) is True
    assert is_lowercased({}, ["<pad>", "A", "dog"]) is False
