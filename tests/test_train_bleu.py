"""BLEU: sacrebleu on detokenized hypotheses, <unk> kept unless asked, case handling, signature."""

from types import SimpleNamespace

import embinit.train.translation as translation
from embinit.config import TrialConfig
from embinit.train.bleu import corpus_bleu, detokenize_all, is_lowercased
from embinit.vocab import Vocab


def test_unk_is_kept_as_one_word_and_specials_dropped_before_detokenizing():
    hyps = detokenize_all([["a", "<unk>", "dog", "runs", ".", "<eos>", "<pad>"]], lambda t: " ".join(t))
    assert hyps == ["a \u2047 dog runs ."]


def test_a_kept_unk_is_one_missed_token_not_three():
    """Written as "<unk>", 13a made it "<", "unk", ">": three misses and a longer output. As one word it is
    one miss, as an unknown reference word would be: the score of a hypothesis with any other word there."""
    ref = ["a brown dog runs on the grass ."]
    kept = detokenize_all([["a", "<unk>", "dog", "runs", "on", "the", "grass", "."]], lambda t: " ".join(t))
    assert corpus_bleu(kept, ref, lowercase=True)[0] == corpus_bleu(["a zebra dog runs on the grass ."], ref,
                                                                     lowercase=True)[0]
    assert corpus_bleu(kept, ref, lowercase=True)[0] > corpus_bleu(["a <unk> dog runs on the grass ."], ref,
                                                                   lowercase=True)[0]


def test_a_unk_glued_to_its_neighbours_by_a_subword_detokenizer_is_spaced_apart():
    glued = detokenize_all([["Ġthe", "<unk>", "Ġdog"]], lambda t: "".join(t).replace("Ġ", " ").strip())
    assert glued == ["the \u2047 dog"]


def test_dropping_unk_is_an_explicit_option():
    hyps = detokenize_all([["a", "<unk>", "dog", "runs", ".", "<eos>"]], lambda t: " ".join(t), drop_unk=True)
    assert hyps == ["a dog runs ."]


def _task_with_hypothesis(tokens, extras, monkeypatch):
    vocab = Vocab(["<pad>", "<unk>", "<bos>", "<eos>", "a", "dog", "runs", "on", "the", "grass", "."])
    data = SimpleNamespace(vocab=vocab, splits={"train": [], "val": [([4], [4])], "test": [([4], [4])]},
                           eval_splits=["val", "test"], info={"lowercase": True},
                           references={"test": ["a brown dog runs on the grass ."]},
                           detokenize=lambda t: " ".join(t))
    ids = vocab.encode(tokens)
    monkeypatch.setattr(translation, "translate", lambda model, sources, **kw: [ids for _ in sources])
    cfg = TrialConfig(task="synthetic_translation", extras=extras).resolved()
    return translation.TranslationTask(data, cfg, "cpu", lambda: None)


def test_trial_bleu_keeps_unk_by_default_and_says_so_in_the_signature(monkeypatch):
    hyp = ["a", "<unk>", "dog", "runs", "on", "the", "grass", "."]
    kept, sig_kept = _task_with_hypothesis(hyp, {}, monkeypatch).bleu(None, "test")
    dropped, sig_dropped = _task_with_hypothesis(hyp, {"bleu_drop_unk": True}, monkeypatch).bleu(None, "test")
    ref = "a brown dog runs on the grass ."
    assert kept == corpus_bleu(["a \u2047 dog runs on the grass ."], [ref], lowercase=True)[0]
    assert dropped == corpus_bleu(["a dog runs on the grass ."], [ref], lowercase=True)[0]
    assert kept != dropped
    assert sig_kept.endswith("|unk:one-word") and sig_dropped.endswith("|unk:dropped")
    assert "tok:13a" in sig_kept and "case:lc" in sig_kept


def test_a_trials_references_are_tokenized_once_and_score_as_before(monkeypatch):
    # three evaluations of one split (three epochs): sacrebleu tokenizes its references at the first only,
    # and every score and signature is bit-identical to sacrebleu's own corpus_score with the references
    from sacrebleu.metrics import BLEU
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    refs = ["a brown dog runs on the grass .", "the dog runs .", "a dog on the grass", "grass ."]
    task = _task_with_hypothesis(["a"], {}, monkeypatch)
    task.data.splits["test"] = [([4], [4])] * len(refs)
    task.data.references = {"test": refs}
    epochs = [["a", "dog", "runs", "."], ["the", "dog", "runs", "on", "the", "grass", "."], ["grass", "."]]
    expected = []
    for tokens in epochs:   # sacrebleu's own score of each epoch's hypotheses, references given
        bleu = BLEU(lowercase=True, force=True)
        score = bleu.corpus_score([" ".join(tokens)] * len(refs), [refs]).score
        expected.append((score, f"{bleu.get_signature()}|unk:one-word"))
    calls = []
    tokenize = Tokenizer13a.__call__.__wrapped__   # sacrebleu's tokenizer without its per-instance cache
    monkeypatch.setattr(Tokenizer13a, "__call__", lambda self, line: calls.append(line) or tokenize(self, line))
    scored = []
    for tokens in epochs:
        ids = task.data.vocab.encode(tokens)
        monkeypatch.setattr(translation, "translate", lambda model, sources, ids=ids, **kw: [ids for _ in sources])
        scored.append(task.bleu(None, "test"))
    assert scored == expected and len(set(scored)) == len(epochs)
    # references once, hypotheses at each evaluation (before: references again at every evaluation)
    assert len(calls) == len(refs) + len(epochs) * len(refs)


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


def test_corpus_bleu_of_known_sentences_computed_by_hand():
    """Not symmetric in hypothesis and reference, and a corpus score (pooled n-gram counts), not a mean of
    sentence scores. One pair: precisions 7/7, 5/6, 4/5, 3/4 (geometric mean 0.5^(1/4)), hypothesis 7
    words against 8 (brevity penalty e^(-1/7)): 72.8955 (swapped: 70.71). With an exact second pair the
    counts pool to 11/11, 8/9, 6/7, 4/5, 11 words against 12: 80.680 (the sentences' mean: 86.45)."""
    import math

    import pytest
    one, _ = corpus_bleu(["a dog runs on the grass ."], ["a brown dog runs on the grass ."], True)
    assert one == pytest.approx(100 * math.exp(-1 / 7) * 0.5 ** 0.25, abs=1e-9)
    assert one == pytest.approx(72.8955, abs=1e-4)
    two, _ = corpus_bleu(["a dog runs on the grass .", "the cat sleeps ."],
                         ["a brown dog runs on the grass .", "the cat sleeps ."], True)
    assert two == pytest.approx(100 * math.exp(-1 / 11) * (192 / 315) ** 0.25, abs=1e-9)
