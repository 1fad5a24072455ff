"""The raw (untokenized) form of every task, and each real task's local file layout and labels.

Every source (local files, Hugging Face `datasets`, the synthetic generators) produces a `RawData`;
tokenization, vocabularies and caching then work the same for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from embinit.errors import EmbinitError


@dataclass
class RawData:
    """splits: translation [(src, tgt)], classification [(text, label)] or [(text_a, text_b, label)]
    (label already an int), lm [line] (stripped; blank lines kept: every line ends with <eos>, WikiText's
    convention, so word-level token counts equal the published ones)."""

    kind: str
    splits: dict[str, list]
    eval_splits: list[str]
    loaded_from: str
    label_names: list[str] | None = None
    extra_info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Layout:
    """How one task looks on disk. `files[split]` lists candidate names, the first that exists wins
    (translation: file stems, read as `<stem>.<src_lang>` and `<stem>.<tgt_lang>`)."""

    kind: str
    files: dict[str, tuple[str, ...]]
    eval_splits: tuple[str, ...]
    src_lang: str = "en"
    tgt_lang: str = "en"
    columns: tuple[str, ...] = ()          # TSV: text column(s), then the label column
    labels: tuple[str, ...] = ()           # label values as written in the files, in id order
    label_names: tuple[str, ...] = ()


LAYOUTS: dict[str, Layout] = {
    # Multi30k task 1 raw files (github.com/multi30k/dataset data/task1/raw, gunzipped).
    "multi30k": Layout("translation", {"train": ("train",), "val": ("val",), "test": ("test_2016_flickr",)},
                       ("val", "test"), src_lang="de", tgt_lang="en"),
    # IWSLT2017 de-en as aligned line files: the dev set may be called val, valid or dev; TaskData always
    # names it "val", as for Multi30k. The unpacked release (train.tags + XML) is read too: see iwslt.py.
    "iwslt2017": Layout("translation", {"train": ("train",), "val": ("val", "valid", "dev"),
                                        "test": ("test",)}, ("val", "test"), src_lang="de", tgt_lang="en"),
    # GLUE SST-2: train.tsv / dev.tsv with header "sentence<TAB>label" (test.tsv has no labels).
    "sst2": Layout("classification", {"train": ("train.tsv",), "dev": ("dev.tsv",)}, ("dev",),
                   columns=("sentence", "label"), labels=("0", "1"), label_names=("negative", "positive")),
    # GLUE MNLI: the label order is GLUE's / Hugging Face's (entailment 0, neutral 1, contradiction 2).
    "mnli": Layout("classification", {"train": ("train.tsv",), "dev_matched": ("dev_matched.tsv",),
                                      "dev_mismatched": ("dev_mismatched.tsv",)},
                   ("dev_matched", "dev_mismatched"), columns=("sentence1", "sentence2", "gold_label"),
                   labels=("entailment", "neutral", "contradiction"),
                   label_names=("entailment", "neutral", "contradiction")),
    # WikiText-2: the tokenized v1 release (.tokens) or the raw release (.raw).
    "wikitext2": Layout("lm", {s: (f"wiki.{s}.tokens", f"wiki.{s}.raw") for s in ("train", "valid", "test")},
                        ("valid", "test")),
}

LM_SPLITS = ("train", "valid", "test")


def lm_split_map(task: str, kind: str, train_split: str | None, eval_split: str | None) -> dict[str, str]:
    """TaskData split name -> source split name for LM tasks. By default train/valid/test; with
    `train_split="valid", eval_split="test"` (e.g. a WikiText-2 copy without its train file) the model
    trains on the valid file, validates on the test file, and there is no separate test split."""
    if kind != "lm":
        if train_split is not None or eval_split is not None:
            raise EmbinitError(f"train_split/eval_split apply to language-model tasks only, not {task!r}")
        return {}
    train = train_split or "train"
    evals = eval_split or "valid"
    for arg, value in (("train_split", train), ("eval_split", evals)):
        if value not in LM_SPLITS:
            raise EmbinitError(f"{arg}={value!r} is not a split of {task!r}; choose from {list(LM_SPLITS)}")
    if train == evals:
        raise EmbinitError(f"train_split and eval_split are both {train!r}; evaluation needs held-out data")
    mapping = {"train": train, "valid": evals}
    rest = [s for s in LM_SPLITS if s not in (train, evals)]
    if rest == ["test"]:
        mapping["test"] = "test"
    return mapping


def label_id(value: str, layout: Layout, where: str) -> int:
    """A label as written in the data -> its id; unknown values are an error naming the valid ones."""
    try:
        return layout.labels.index(value.strip())
    except ValueError:
        raise EmbinitError(f"{where}: unknown label {value!r}; valid labels: {list(layout.labels)}") from None
