"""The task registry: one `TaskEntry` per task name, one `KindEntry` per task kind (embinit.task_types).

A *task* (multi30k, sst2, ...) is data and defaults: its kind, its Table 5 hyperparameters, the ranges
of its metrics, the metrics the report reads (primary, selection, reported, curve), where its raw data
lives on disk (`Layout`) and on the Hugging Face hub (`Hub`), or the function that generates it. A
*kind* (translation, classification, lm) is code: its embedding-table sides, model class, Task class
(the `Task` protocol, embinit.train.task), its data functions, and whether its trials fuse.

Every module that used to branch on the task or kind reads these entries. Code is referenced as
"module:attribute" and imported on first use, as in embinit.init.registry, so reading the registry (spec
validation, the service's catalog) never imports torch. `register_kind` / `register_task` add entries at
run time (the tests' toy kind), `unregister` removes them; such an entry exists in that process only (a
Ray worker imports the registry afresh), so lasting tasks and kinds belong in this module.
docs/architecture.md, "Adding a task, a task kind, an OOV rule, a tokenizer or an analysis", lists the steps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, MutableMapping, Set
from contextvars import ContextVar
from typing import Callable

from embinit.errors import EmbinitError, unknown_name
from embinit.task_types import (Hub, KindEntry, Layout, TaskDefaults, TaskEntry, classification_task, load,
                                lm_task, translation_task)

KINDS: dict[str, KindEntry] = {
    "translation": KindEntry(
        "encoder-decoder trained with teacher forcing; BLEU", ("src", "tgt"),
        "embinit.models.seq2seq:EncoderDecoder", "embinit.train.translation:TranslationTask",
        "embinit.tasks.build:build_translation", "embinit.tasks.data:pair_text",
        "embinit.tasks.local:read_pairs", "embinit.tasks.hub_rows:pair_row",
        fused="embinit.models.fused:FusedEncoderDecoder", graphed=True, decodes=True),
    "classification": KindEntry(
        "encoder-only classifier; accuracy", ("tok",), "embinit.models.encoder:EncoderClassifier",
        "embinit.train.classification:ClassificationTask", "embinit.tasks.build:build_classification",
        "embinit.tasks.data:labelled_text", "embinit.tasks.local:read_labelled",
        "embinit.tasks.hub_rows:labelled_row", fused="embinit.models.fused_encoder:FusedClassifier"),
    "lm": KindEntry(
        "decoder-only language model; perplexity", ("tok",), "embinit.models.encoder:DecoderLM",
        "embinit.train.lm:LMTask", "embinit.tasks.build:build_lm", "embinit.tasks.data:stream_text",
        "embinit.tasks.local:read_stream", "embinit.tasks.hub_rows:stream_row", stream=True,
        fused="embinit.models.fused_encoder:FusedLM"),
}

GENERATED = "embinit.tasks.synthetic:generate"
_BUILTIN: dict[str, TaskEntry] = {
    # Multi30k task 1 raw files (github.com/multi30k/dataset data/task1/raw, gunzipped).
    "multi30k": translation_task(
        TaskDefaults("translation", "Multi30k task 1 de->en, test_2016_flickr BLEU at best val loss",
                     epochs=20, batch_size=64, lr=2e-4, min_freq=2, metric="bleu"),
        layout=Layout("translation", {"train": ("train",), "val": ("val",), "test": ("test_2016_flickr",)},
                      ("val", "test"), src_lang="de", tgt_lang="en"),
        hub=Hub("bentrevett/multi30k", None, {"train": "train", "validation": "val", "test": "test"},
                ("de", "en"))),
    # IWSLT2017 de-en as aligned line files: the dev set may be called val, valid or dev; TaskData always
    # names it "val", as for Multi30k. The unpacked release (train.tags + XML) is read too: see iwslt.py.
    # Without a folder, that release is read from the zip in the hub dataset's repository: its loading script
    # is what `datasets` 4 and later refuse ("Dataset scripts are no longer supported").
    "iwslt2017": translation_task(
        TaskDefaults("translation", "IWSLT2017 de->en, test BLEU at best val loss",
                     epochs=20, batch_size=128, lr=2e-4, min_freq=5, metric="bleu"),
        layout=Layout("translation", {"train": ("train",), "val": ("val", "valid", "dev"), "test": ("test",)},
                      ("val", "test"), src_lang="de", tgt_lang="en", release=True),
        hub=Hub("IWSLT/iwslt2017", "iwslt2017-de-en", {"train": "train", "validation": "val", "test": "test"},
                ("de", "en"), archive="data/2017-01-trnted/texts/de/en/de-en.zip")),
    # GLUE SST-2: train.tsv / dev.tsv with header "sentence<TAB>label" (test.tsv has no labels).
    "sst2": classification_task(
        TaskDefaults("classification", "GLUE SST-2 sentiment, best dev accuracy",
                     epochs=5, batch_size=128, lr=1e-4, min_freq=2, metric="acc"),
        layout=Layout("classification", {"train": ("train.tsv",), "dev": ("dev.tsv",)}, ("dev",),
                      columns=("sentence", "label"), labels=("0", "1"), label_names=("negative", "positive")),
        hub=Hub("nyu-mll/glue", "sst2", {"train": "train", "validation": "dev"}, ("sentence",))),
    # GLUE MNLI: the label order is GLUE's / Hugging Face's (entailment 0, neutral 1, contradiction 2). The
    # MultiNLI 1.0 release folder (multinli_1.0_*.jsonl) is read too: see multinli.py.
    "mnli": classification_task(
        TaskDefaults("classification", "GLUE MNLI entailment, best dev matched/mismatched accuracy",
                     epochs=10, batch_size=128, lr=1e-4, min_freq=2, metric="acc_matched"),
        layout=Layout("classification", {"train": ("train.tsv",), "dev_matched": ("dev_matched.tsv",),
                                         "dev_mismatched": ("dev_mismatched.tsv",)},
                      ("dev_matched", "dev_mismatched"), columns=("sentence1", "sentence2", "gold_label"),
                      labels=("entailment", "neutral", "contradiction"),
                      label_names=("entailment", "neutral", "contradiction"), release=True),
        hub=Hub("nyu-mll/glue", "mnli", {"train": "train", "validation_matched": "dev_matched",
                                         "validation_mismatched": "dev_mismatched"}, ("premise", "hypothesis"))),
    # A small, fast LM setting (6 layers, 8 heads, feed-forward 2,048 as the KNN-similarity blog's code;
    # batch 32 x 128 tokens and lr 3e-4 are embinit's). The blog's own settings (its repository's config:
    # sequence 512, batch 12, lr 1e-4, dropout 0.2, pre-norm) are set in tune_configs/blog/.
    # Files: the tokenized v1 release (.tokens) or the raw release (.raw).
    "wikitext2": lm_task(
        TaskDefaults("lm", "WikiText-2 language modelling with the GPT-2 tokenizer, perplexity",
                     epochs=10, batch_size=32, lr=3e-4, min_freq=1, layers=6, ff_dim=2048,
                     max_len=128, metric="ppl"),
        layout=Layout("lm", {s: (f"wiki.{s}.tokens", f"wiki.{s}.raw") for s in ("train", "valid", "test")},
                      ("valid", "test")),
        hub=Hub("Salesforce/wikitext", "wikitext-2-raw-v1", {"train": "train", "validation": "valid", "test": "test"},
                ("text",)),
        tokenizer="gpt2"),
    # Small generated tasks that a 1-layer model learns in seconds: for tests, demos and benchmarks.
    "synthetic_translation": translation_task(
        TaskDefaults("translation", "generated copy/reverse translation (tests)",
                     epochs=5, batch_size=32, lr=1e-3, min_freq=1, layers=1,
                     heads=4, ff_dim=64, d_model=32, max_len=32, metric="bleu"), generate=GENERATED),
    "synthetic_classification": classification_task(
        TaskDefaults("classification", "generated keyword classification (tests)",
                     epochs=5, batch_size=32, lr=1e-3, min_freq=1, layers=1,
                     heads=4, ff_dim=64, d_model=32, max_len=32, metric="acc"), generate=GENERATED),
    "synthetic_lm": lm_task(
        TaskDefaults("lm", "generated repeating-pattern language model (tests)",
                     epochs=5, batch_size=16, lr=1e-3, min_freq=1, layers=1, heads=4,
                     ff_dim=64, d_model=32, max_len=32, metric="ppl"), generate=GENERATED),
}


# The tasks defined in a spec (embinit.task_defs), registered by `define`: a spec names one only by
# defining it, and the service's catalog does not list them. They live in this process's layer, or, inside
# `scoped()`, in that scope's own: the service validates each submitted spec and builds each read in a
# scope, so two specs that define one name differently, checked at once in its threads, each read their
# own definition (a scope sees the built-in tasks and its own definitions, not the process's).
_PROCESS_DEFS: dict[str, TaskEntry] = {}
_SCOPE: ContextVar[dict[str, TaskEntry] | None] = ContextVar("embinit_defined_tasks", default=None)


def _defined() -> dict[str, TaskEntry]:
    scope = _SCOPE.get()
    return _PROCESS_DEFS if scope is None else scope


class _Tasks(MutableMapping):
    """Every task by name: the built-in and registered ones (`register_task`), then the defined ones the
    current scope sees."""

    def __getitem__(self, name: str) -> TaskEntry:
        defined = _defined()
        return defined[name] if name in defined else _BUILTIN[name]

    def __setitem__(self, name: str, entry: TaskEntry) -> None:
        _BUILTIN[name] = entry

    def __delitem__(self, name: str) -> None:
        del _BUILTIN[name]

    def __contains__(self, name: object) -> bool:
        return name in _defined() or name in _BUILTIN

    def __iter__(self) -> Iterator[str]:
        defined = list(_defined())
        return iter([*_BUILTIN, *(n for n in defined if n not in _BUILTIN)])

    def __len__(self) -> int:
        return len(_BUILTIN.keys() | _defined().keys())


class _Defined(Set):
    """The names of the defined tasks the current scope sees."""

    def __contains__(self, name: object) -> bool:
        return name in _defined()

    def __iter__(self) -> Iterator[str]:
        return iter(list(_defined()))

    def __len__(self) -> int:
        return len(_defined())

    @classmethod
    def _from_iterable(cls, names) -> set[str]:   # `DEFINED & names` etc.: a plain set
        return set(names)


TASKS = _Tasks()
DEFINED = _Defined()


def define(name: str, entry: TaskEntry) -> None:
    """Register a task defined in a spec (embinit.task_defs.ensure checks it first), in the current scope."""
    _defined()[name] = entry


@contextlib.contextmanager
def scoped() -> Iterator[None]:
    """Tasks defined inside are seen inside only, by this thread (and the tasks it starts with this
    context): none defined before, in the process or an outer scope, is seen."""
    token = _SCOPE.set({})
    try:
        yield
    finally:
        _SCOPE.reset(token)


def register_kind(name: str, entry: KindEntry) -> None:
    if name in KINDS:
        raise EmbinitError(f"task kind {name!r} is already registered")
    KINDS[name] = entry


def register_task(name: str, entry: TaskEntry) -> None:
    if name in TASKS:
        raise EmbinitError(f"task {name!r} is already registered")
    if entry.kind not in KINDS:
        raise unknown_name("task kind", entry.kind, KINDS)
    TASKS[name] = entry


def unregister(task: str | None = None, kind: str | None = None) -> None:
    """Remove a task and/or a kind registered at run time (tests clean up with it)."""
    _BUILTIN.pop(task, None)
    _defined().pop(task, None)
    KINDS.pop(kind, None)


def task_entry(task: str) -> TaskEntry:
    if task not in TASKS:
        raise unknown_name("task", task, TASKS)
    return TASKS[task]


def kind_entry(kind: str) -> KindEntry:
    if kind not in KINDS:
        raise unknown_name("task kind", kind, KINDS)
    return KINDS[kind]


def task_kind(task: str) -> KindEntry:
    """The kind entry of a task."""
    return kind_entry(task_entry(task).kind)


def kind_code(kind: str, part: str) -> Callable:
    """A kind's code by its field name ("model", "task", "build", ...), imported now."""
    return load(getattr(kind_entry(kind), part))


def primary_metric(task: str) -> str:
    """The number Table 1 reports for a task."""
    return task_entry(task).primary


def selection_metric(task: str) -> tuple[str, str]:
    """(validation metric, mode) a search selects points by."""
    return task_entry(task).selection


def tracked_metrics(task: str) -> list[tuple[str, str]]:
    """The validation metrics the trainer tracks for `task`, each with its best value and epoch
    (`best/<metric>`), as (metric, mode): the selection metric (the best checkpoint's criterion), then the
    validation metric of each reported `best/val/...` (MNLI: matched and mismatched), then the loss on the
    split of each tracked accuracy (`val/acc_matched` -> `val/loss_matched`). A search can select points
    only by one of these."""
    from embinit.comparison import higher_is_better
    out = [selection_metric(task)]
    for m in reported_metrics(task):
        name = m.removeprefix("best/")
        if m.startswith("best/val/") and name not in dict(out):
            out.append((name, "max" if higher_is_better(name) else "min"))
    for name, _ in list(out):
        loss = _split_loss(name)
        if loss and loss not in dict(out):
            out.append((loss, "min"))
    return out


def _split_loss(metric: str) -> str | None:
    """The loss on the split of a tracked accuracy (`val/acc_matched` -> `val/loss_matched`); None for
    another metric."""
    return metric.replace("val/acc", "val/loss", 1) if metric.startswith("val/acc") else None


def reported_metrics(task: str) -> list[str]:
    """Every metric the report shows for a task (MNLI: matched and mismatched)."""
    return list(task_entry(task).reported)


def curve_metric(task: str) -> str:
    """The validation curve Figure 1 shows; val/loss for a task the registry does not know."""
    return TASKS[task].curve if task in TASKS else "val/loss"


def loss_metric(task: str | None) -> str:
    """The validation loss the curves show beside `curve_metric`: the loss on the split the task selects its
    best epoch on (`selection_metric`; MNLI's val/acc_matched -> val/loss_matched, the only val/loss it
    logs is per split); val/loss where the selection metric is a loss or a perplexity (translation, LM) and
    for a task the registry does not know."""
    return (_split_loss(TASKS[task].selection[0]) if task in TASKS else None) or "val/loss"


def task_metric_ranges() -> dict[str, tuple[float, float]]:
    """The metric ranges every registered task declares, merged."""
    out: dict[str, tuple[float, float]] = {}
    for entry in TASKS.values():
        out.update(entry.metric_ranges)
    return out
