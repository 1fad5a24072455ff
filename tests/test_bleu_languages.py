"""BLEU is scored with sacrebleu's tokenizer for the target language (embinit.bleu_rules): a Chinese target
with `zh` (13a reads a sentence written without spaces as one word), Japanese and Korean with MeCab,
which a trial needs installed before it trains; every other language with 13a, as before, under the same
keys."""

from __future__ import annotations

from pathlib import Path

import pytest
import sacrebleu

from embinit import bleu_rules
from embinit.config import TrialConfig, config_problems
from embinit.train.bleu import corpus_bleu

TINY = {"epochs": 1, "layers": 1, "d_model": 16, "heads": 2, "ff_dim": 32, "batch_size": 8, "min_freq": 1,
        "max_len": 32}
PAIRS = [("the cat", "我喜欢猫"), ("the dog", "我喜欢狗"), ("a red house", "一座红房子"), ("a small dog", "一只小狗")]


def definition(target: str) -> dict:
    return {"like": "multi30k", "languages": ["en", target], "files": {"train": "train", "val": "dev", "test": "test"},
            **TINY}


def test_the_tokenizer_follows_sacrebleus_rule_for_the_target_language():
    assert [bleu_rules.bleu_tokenizer(lang) for lang in ("zh", "ja", "ko", "en", "de", "ZH", None)] == \
        ["zh", "ja-mecab", "ko-mecab", "13a", "13a", "zh", "13a"]
    hyps, refs = ["我喜欢猫", "一座房子"], ["我喜欢狗", "一座红房子"]
    score, signature = corpus_bleu(hyps, refs, lowercase=False, tokenize="zh")
    assert score == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize="zh").score, abs=1e-12)
    assert score > 0
    assert "tok:zh" in signature
    assert corpus_bleu(hyps, refs, lowercase=False)[0] == 0.0   # 13a: each sentence one unmatched word


def test_a_chinese_target_is_in_the_key_and_other_targets_keep_theirs():
    zh = TrialConfig(task="en_zh", task_def=definition("zh"), data_dir="/x")
    fr = TrialConfig(task="en_fr", task_def=definition("fr"), data_dir="/x")
    assert zh.key_fields()["bleu_tokenize"] == "zh"
    assert "bleu_tokenize" not in fr.key_fields()
    assert "bleu_tokenize" not in TrialConfig(task="multi30k", init="xavier", seed=0).key_fields()


def test_a_japanese_target_without_mecab_is_refused_before_training(monkeypatch):
    monkeypatch.setattr(bleu_rules.importlib.util, "find_spec", lambda name: None)
    problems = config_problems(TrialConfig(task="en_ja", task_def=definition("ja"), data_dir="/x"))
    assert ("en_ja: BLEU on 'ja' targets is scored with sacrebleu's 'ja-mecab' tokenizer, which needs MeCab, "
            "ipadic (pip install 'sacrebleu[ja]')") in problems
    assert config_problems(TrialConfig(task="en_zh", task_def=definition("zh"), data_dir="/x")) == []


@pytest.mark.slow
def test_a_trained_chinese_pair_logs_bleu_scored_with_the_zh_tokenizer(tmp_path: Path):
    from embinit.train.trial import run_trial
    folder = tmp_path / "en-zh"
    folder.mkdir()
    for split, n in (("train", 32), ("dev", 8), ("test", 8)):
        rows = [PAIRS[i % len(PAIRS)] for i in range(n)]
        (folder / f"{split}.en").write_text("\n".join(s for s, _ in rows) + "\n", encoding="utf-8")
        (folder / f"{split}.zh").write_text("\n".join(" ".join(t) for _, t in rows) + "\n", encoding="utf-8")
    cfg = TrialConfig(task="en_zh", task_def=definition("zh"), data_dir=str(folder), tokenizer="whitespace",
                      threads=1)
    result = run_trial(cfg, cache_dir=False)
    assert result.status == "finished"
    assert "tok:zh" in result.bleu_signature
