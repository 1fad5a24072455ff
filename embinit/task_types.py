"""The shapes of the task registry's entries (embinit.task_registry): `KindEntry` (a task kind's
code), `TaskEntry` (a task: `TaskDefaults`, metrics, `Layout`, `Hub`) and the per-kind metric
conventions the built-in tasks follow (`translation_task`, ...). Torch-free: code is referenced as
"module:attribute" and imported on first use (`load`), as in embinit.init.registry."""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import Any


def load(ref: str) -> Any:
    """The object a "module:attribute" reference names."""
    module, attribute = ref.split(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass(frozen=True)
class KindEntry:
    """One task kind. Every reference is "module:attribute".

    model: an nn.Module class with `from_tables(tables, cfg, num_labels, pad_id)`; task: a class with
    `from_setup(setup, autocast)` meeting the `Task` protocol; build: RawData -> tokenized payload
    (embinit.tasks.build); read_split: (paths, layout) -> rows of one local split (embinit.tasks.local);
    hub_row: (row, layout, columns, where) -> one example (embinit.tasks.hub_rows); text: (TaskData, side)
    -> the side's training text as id lists (the `focus` OOV rule); fused: a `StackedModel` class
    (embinit.models.stacked) whose `losses` the kind's Task feeds in `fused_loss(fused, batches)`."""

    description: str
    sides: tuple[str, ...]        # embedding tables, the target (or only) side last
    model: str
    task: str
    build: str
    text: str
    read_split: str = ""
    hub_row: str = ""
    fused: str = ""               # the fused model class (embinit.models.stacked) its trials train as one
                                  # group with; its Task then has `fused_loss`. "": the kind does not fuse
    stream: bool = False          # one token stream per split (LM): train_split/eval_split choose the
                                  # source splits, GPT-2 brings its full vocabulary, tables may be tied
    graphed: bool = False         # its trials can train with a CUDA-graphed step (`cuda_graphs`,
                                  # embinit.train.graphed): translation only so far
    decodes: bool = False         # its evaluation decodes output sequences (`beam_size`, `length_penalty`):
                                  # translation; a classifier's and a language model's never read them

    @property
    def fusable(self) -> bool:
        """Trials of this kind can train as one fused model."""
        return bool(self.fused)

    @property
    def two_sided(self) -> bool:
        """A source and a target table (a source-side init of its own is meaningful)."""
        return "src" in self.sides


@dataclass(frozen=True)
class TaskDefaults:
    """Per-task defaults. Sources: paper Table 5 / appendix A.2 unless the comment says otherwise."""

    kind: str
    description: str
    epochs: int
    batch_size: int
    lr: float
    min_freq: int
    layers: int = 3
    heads: int = 8
    ff_dim: int = 512     # Table 5's parameter counts imply a 512-wide feed-forward layer
    dropout: float = 0.1
    d_model: int = 512    # used only when no pretrained source fixes D
    max_len: int = 256    # longest sequence kept (longer ones are truncated)
    metric: str = "bleu"  # the metric reported in Table 1


@dataclass(frozen=True)
class Layout:
    """How one task looks on disk. `files[split]` lists candidate names, the first that exists wins
    (two-sided kinds: file stems, read as `<stem>.<src_lang>` and `<stem>.<tgt_lang>`)."""

    kind: str
    files: dict[str, tuple[str, ...]]
    eval_splits: tuple[str, ...]
    src_lang: str = "en"
    tgt_lang: str = "en"
    columns: tuple[str, ...] = ()          # classification: text column(s), then the label column; a JSONL
                                           # LM corpus: its text key
    labels: tuple[str, ...] = ()           # label values as written in the files, in id order; none (a
                                           # defined task's): the train file's, sorted (tasks/local.py)
    label_names: tuple[str, ...] = ()
    release: bool = False                  # the unpacked release is read too: IWSLT's (train.tags + XML),
                                           # MultiNLI 1.0's (multinli_1.0_*.jsonl)
    format: str = "tsv"                    # classification files: tsv (GLUE's) | csv | jsonl; lm: text
                                           # (a defined one's; the built-in one's "tsv" reads as text) | jsonl


@dataclass(frozen=True)
class Hub:
    """A task's Hugging Face dataset: path (the repository's canonical id: the one its hub cache folder is
    named by), config, {hub split: TaskData split}, text columns. `archive`: a zip file in the repository
    that holds the task's release files, read as a local release folder; for a dataset whose hub copy is a
    loading script, which `datasets` 4 and later no longer runs (IWSLT2017)."""

    path: str
    config: str | None
    splits: dict[str, str]
    columns: tuple[str, ...]
    archive: str | None = None

    @property
    def name(self) -> str:
        return f"{self.path}/{self.config}" if self.config else self.path


@dataclass(frozen=True)
class TaskEntry:
    """One task: its defaults, metrics and data source (a Layout and a Hub, or a generator)."""

    defaults: TaskDefaults
    primary: str                          # the number Table 1 reports
    selection: tuple[str, str]            # (validation metric, mode) a search selects points by
    reported: tuple[str, ...]             # every metric the report shows
    curve: str                            # the validation curve Figure 1 shows
    metric_ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    layout: Layout | None = None
    hub: Hub | None = None
    generate: str = ""                    # "module:attribute" (task, seed, splits, noise) -> RawData
    tokenizer: str = "spacy"              # what tokenizer="auto" means for this task (no sub-word init)
    definition: str = ""                  # a spec-defined task: its definition as JSON (embinit.task_defs)

    @property
    def kind(self) -> str:
        return self.defaults.kind


BLEU, ACC, PPL = {"bleu": (0.0, 100.0)}, {"acc": (0.0, 1.0)}, {"ppl": (1.0, math.inf)}


def translation_task(defaults: TaskDefaults, **data) -> TaskEntry:
    """Test BLEU at the best-val-loss epoch (the paper picks checkpoints by val loss)."""
    m = defaults.metric
    return TaskEntry(defaults, f"test/{m}", ("val/loss", "min"), (f"test/{m}",), f"val/{m}", BLEU, **data)


def classification_task(defaults: TaskDefaults, **data) -> TaskEntry:
    """The best validation (dev) metric; MNLI reports matched and mismatched."""
    first = f"best/val/{defaults.metric}"
    reported = (first, first.replace("_matched", "_mismatched")) if first.endswith("_matched") else (first,)
    return TaskEntry(defaults, first, (f"val/{defaults.metric}", "max"), reported, f"val/{defaults.metric}",
                     ACC, **data)


def lm_task(defaults: TaskDefaults, **data) -> TaskEntry:
    """Test perplexity at the best-val-perplexity epoch."""
    return TaskEntry(defaults, "test/ppl", ("val/ppl", "min"), ("test/ppl",), "val/ppl", PPL, **data)
