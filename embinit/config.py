"""One trial's configuration; `task_defaults` reads a task's default hyperparameters (the paper's Table 5)
from the task registry (embinit.task_registry).

`TrialConfig` is the contract between the layers: the spec expands into TrialConfigs, the sweep hashes
them into trial keys and ships them to Ray workers as plain dicts, the trainer runs one, the service
shows them. Field names here are the parameter names logged to MLflow.

Knob kinds (Google's tuning playbook): task x init x seed are *scientific*; lr, batch size, dropout and
the like are *nuisance* (searched per grid point when the spec asks); model sizes are *fixed*.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from embinit.bleu_rules import DEFAULT as BLEU_DEFAULT, bleu_tokenizer, target_language, tokenizer_problem
from embinit.errors import EmbinitError, did_you_mean
from embinit.file_inputs import key_values
from embinit.init.registry import DEFAULT_OOV
from embinit.task_registry import task_entry, task_kind, task_metric_ranges
from embinit.task_types import TaskDefaults
from embinit.tasks.synthetic import check_noise
from embinit.tasks.tokenization import WORD_LEVEL

# Bumped whenever a change to the code changes what a trial computes, so that old MLflow runs are not
# reused for new code (the trial key includes it). tests/test_code_version.py fails when fixed tiny trials
# compute other numbers under the same version (docs/architecture.md, "Trial keys and file inputs").
# 2: from that guard on; 1 spans every earlier change, BLEU's `<unk>` (01ce71b) among them.
# 3: a kept `<unk>` is scored as one word, not as 13a's three tokens "<", "unk", ">" (embinit.train.bleu).
CODE_VERSION = "3"

# A trial's `precision`, declared once (the spec's field, `embinit train --precision`, the trainer's check).
PRECISIONS = ("fp32", "bf16", "auto")

# The range of each metric embinit logs, by the last part of its name (`test/bleu` -> `bleu`; a
# `_matched`/`_mismatched` or `_mean`/`_median` suffix is dropped): confidence intervals are clipped to it.
# A task's own metrics declare theirs in the task registry (BLEU is sacrebleu's 0-100; accuracies are
# logged as fractions); a perplexity is exp(loss) >= 1.
METRIC_RANGES: dict[str, tuple[float, float]] = {
    "loss": (0.0, math.inf), "ppl": (1.0, math.inf),
    "epoch": (1.0, math.inf), "best_epoch": (1.0, math.inf), "wall_time_s": (0.0, math.inf),
    "knn_jaccard": (0.0, 1.0), "knn_overlap": (0.0, 1.0), "coverage": (0.0, 1.0),
}


def metric_range(name: str) -> tuple[float, float]:
    """(low, high) of a metric from METRIC_RANGES and the tasks' ranges; unbounded for one neither lists."""
    ranges = {**task_metric_ranges(), **METRIC_RANGES}
    base = name.rsplit("/", 1)[-1]
    for suffix in ("_matched", "_mismatched", "_weighted_mean", "_weighted_median", "_mean", "_median"):
        base = base.removesuffix(suffix)
    if base.endswith("_epoch") and base not in ranges:
        base = "epoch"
    return ranges.get(base, (-math.inf, math.inf))


def task_defaults(task: str) -> TaskDefaults:
    """A task's defaults (Table 5); an unknown task is an error listing the registered ones."""
    return task_entry(task).defaults


def key_of(fields: dict[str, Any]) -> str:
    """The trial key of `TrialConfig.key_fields`' values: the first 16 hex digits of their canonical
    JSON's sha256."""
    blob = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class TrialConfig:
    """Everything one trial (one trained transformer) depends on. None means "the task's default"."""

    task: str
    init: str = "xavier"                # init spec of the (target-side / only) embedding table
    seed: int = 0
    data_seed: int | None = None        # seed of the data order; None -> `seed`. Two seeds sharing one
                                        # data order is the KNN-similarity post's experiment 1.
    emb_seed: int | None = None         # seed of the embedding tables' init only; None -> `seed`. Every
                                        # other weight, the data order and dropout follow `seed`: trials
                                        # differing only in emb_seed differ only in their tables (the KNN
                                        # post's code: only the token table's init differs)
    init_from: str | None = None        # a best.pt whose non-embedding weights start this model (the
                                        # post's experiment 2: a trained body, re-initialized embeddings)
    src_init: str | None = None         # translation: source-side init spec; None -> same as `init`
    pretrained: str | None = None       # path or hub id of the pretrained source of `init`
    src_pretrained: str | None = None   # same for `src_init`; None -> `pretrained`
    oov: str = DEFAULT_OOV              # rule for rows the pretrained source lacks
    tokenizer: str = "auto"             # auto: spaCy words, or the pretrained model's own tokenizer
    epochs: int | None = None
    batch_size: int | None = None
    max_tokens: int | None = None       # token-budget batches instead of a fixed number of examples
    lr: float | None = None
    d_model: int | None = None          # None -> the pretrained source's D, else the task default
    layers: int | None = None
    heads: int | None = None
    ff_dim: int | None = None
    dropout: float | None = None        # each sub-layer's output and the embeddings + PE (Vaswani et al.)
    attention_dropout: float = 0.0      # on the softmaxed attention weights, every attention (fairseq's name;
                                        # torch.nn.Transformer drops there at its `dropout`). 0: none, the paper's
    activation_dropout: float = 0.0     # after the feed-forward activation, before its second linear (fairseq's
                                        # name; nn.Transformer: its `dropout`). 0: none, the paper's
    min_freq: int | None = None
    max_len: int | None = None
    pe_base: float = 10000.0
    pe_positions: int = 5000            # rows of the position-encoding table: the model's (at least the
                                        # 2 max_len + 2 a sequence needs) and the one `emb/pe_*` and
                                        # `emb/absorption` are measured on (with pe_base), which
                                        # `rescale=absorption:R` targets. 5,000: the paper's Table 6 PE
                                        # statistics (mean 0.131) are those of 5,000 positions
    pre_ln: bool = False
    pos_encoding: bool = True           # Table 3 ablation: position encoding on/off
    train_embeddings: bool = True       # Table 3 ablation: embeddings trainable/frozen
    freeze_non_embeddings: bool = False  # KNN experiment 2: only the embeddings learn
    tie_embeddings: bool = False        # LM: the output layer reuses the token table (GPT-2 style);
                                        # False (default): a separate output projection
    early_stopping_patience: int | None = None
    max_train_examples: int | None = None
    data_dir: str | None = None
    data_revision: str | None = None    # the commit, tag or branch of the task's hub dataset read (a task
                                        # without data_dir); None: the hub's (or the hub cache's) main
    beam_size: int = 1                  # 1 = greedy decoding
    length_penalty: float = 0.6         # beam search: GNMT's alpha, hypotheses ranked by log-probability over
                                        # ((5 + length) / 6) ** alpha (embinit.train.decoding.length_penalty)
    precision: str = "fp32"             # PRECISIONS: fp32 | bf16 (autocast) | auto (bf16 where the CPU has bf16 units)
    threads: int | None = None          # torch intra-op threads; not part of the trial key
    device: str = "auto"                # not part of the trial key
    cuda_graphs: bool = False           # translation on CUDA: the training step captured in CUDA graphs over
                                        # padded shape buckets (embinit.train.graphed). Another dropout
                                        # sample than eager, so in the key when true
    extras: dict[str, Any] = field(default_factory=dict)  # task-specific switches (documented per task)
    task_def: dict[str, Any] | None = None  # a task defined in the spec (embinit.task_defs): registered as
                                            # `task` wherever this config is made; keyed without its description

    NOT_IN_KEY = ("threads", "device")
    KEY_IF_SET = ("data_seed", "init_from", "tie_embeddings", "emb_seed",   # in the key only when not the default
                  "cuda_graphs", "task_def", "data_revision", "length_penalty", "attention_dropout",
                  "activation_dropout")

    # in the key unless at the value every earlier key computed with (so those keys stay reachable)
    KEY_OMIT_AT = {"pe_positions": 512}

    def __post_init__(self):
        for f in dataclasses.fields(self):   # None means the default here too (a spec axis's `null`)
            if f.default not in (None, dataclasses.MISSING) and getattr(self, f.name) is None:
                setattr(self, f.name, f.default)
        if self.task_def is not None:
            from embinit import task_defs
            task_defs.ensure(self.task, self.task_def)

    def resolved(self) -> "TrialConfig":
        """A copy with every None hyperparameter replaced by the task default (d_model excepted:
        it depends on the pretrained source and is resolved by the trainer)."""
        d = task_defaults(self.task)
        out = dataclasses.replace(self)
        for name in ("epochs", "batch_size", "lr", "layers", "heads", "ff_dim", "dropout", "min_freq",
                     "max_len"):
            if getattr(out, name) is None:
                setattr(out, name, getattr(d, name))
        return out

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrialConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise EmbinitError(f"unknown trial config fields {unknown}; valid: {sorted(names)}")
        return cls(**data)

    def tokenizer_for(self, spec) -> str:
        """The tokenizer the trial's data is cut with, for its main side's parsed init `spec`:
        tokenizer="auto" is the pretrained model's own for a sub-word init, else the task's own (its
        registry entry: GPT-2 BPE for wikitext2, spaCy words otherwise; the generated synthetic tasks are
        made of whole words and use spaCy, so they run offline without GPT-2's files)."""
        if self.tokenizer != "auto":
            return self.tokenizer
        if spec.is_subword:
            return self.source_of(spec)
        return task_entry(self.task).tokenizer

    def source_of(self, spec) -> str:
        """Where the main side's parsed init `spec` reads its pretrained table (and, for a sub-word init,
        its own tokenizer): the trial's `pretrained`, else the spec's own, else its source name."""
        return self.pretrained or spec.pretrained or spec.source

    def _subword_bleu_references(self) -> bool:
        """Whether this is a translation trial whose target tokenizer is sub-word: its BLEU references
        are the text as that tokenizer writes it back (embinit.tasks.tokenizer_backends `Backend.references`),
        no longer the raw text. Such keys say so (`bleu_references`), so runs scored the old way are not
        reused; every other key is unchanged."""
        if not task_kind(self.task).two_sided:
            return False
        from embinit.init.registry import parse_init_spec   # torch-free
        try:
            spec = parse_init_spec(self.init)
        except EmbinitError:
            return False   # an invalid init: the trainer refuses it with its own message
        return self.tokenizer_for(spec) not in WORD_LEVEL

    def _table_inits(self) -> list[str]:
        """The init spec of each table the trial builds: the target's, and the source side's when it has one."""
        return [self.init] + ([self.src_init or self.init] if "src" in task_kind(self.task).sides else [])

    def _absorption_on_own_pe(self) -> bool:
        """Whether a table of this trial targets an absorption ratio (`rescale=absorption:R`) against a PE
        table other than the default (5,000 positions, base 10^4). Such a target was set against the
        default table before, whatever the trial's own (embinit.init.rescale), so these trials compute
        other tables now and their keys say so (`absorption_pe`); every other key is unchanged."""
        defaults = {f.name: f.default for f in dataclasses.fields(self) if f.name in ("pe_positions", "pe_base")}
        if self.pe_positions == defaults["pe_positions"] and self.pe_base == defaults["pe_base"]:
            return False
        from embinit.init.registry import reads_pe_table   # torch-free
        return any(reads_pe_table(init) for init in self._table_inits())

    def oov_applies(self) -> bool:
        """Whether the OOV rule can change a table of this trial: some table has rows its source lacks
        (embinit.init.registry `oov_applies`: not a random init's, not a `match`ed one's, which replace
        every row). Where none does, `oov` is keyed at its default: the trials differ in nothing."""
        from embinit.init.registry import oov_applies   # torch-free
        return any(oov_applies(init) for init in self._table_inits())

    def _shuffled_subword_rows(self) -> bool:
        """Whether a table of this trial is shuffled (`shuffle`) and fills its missing rows by `subword_mean`.
        Those rows kept their own token's piece mean before, only its columns permuted (a leak of the
        source's meaning into a shuffled table; embinit.init.transforms.shuffle): these trials compute
        other tables now and their keys say so (`shuffle_subword`); every other key is unchanged."""
        if self.oov != "subword_mean" or not self.oov_applies():
            return False
        from embinit.init.registry import parse_init_spec   # torch-free
        try:
            return any("shuffle" in parse_init_spec(init).transforms for init in self._table_inits())
        except EmbinitError:
            return False   # an invalid init: the trainer refuses it with its own message

    def key(self) -> str:
        """Stable identity of what this trial computes: sha256 of its canonical resolved config and the
        code version (`key_fields`)."""
        return key_of(self.key_fields())

    def key_fields(self) -> dict[str, Any]:
        """What `key` hashes: the resolved config and the code version, without fields that do not change
        results (threads, device); a field naming a local file or folder (pretrained, data_dir, ...) counts
        by its content (embinit.file_inputs). Two configs' keys differ exactly where these values do."""
        d = key_values(self.resolved().to_dict())
        for name in self.NOT_IN_KEY:
            d.pop(name, None)
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name in self.KEY_IF_SET:  # added later: at their default, they leave earlier keys unchanged
            if d.get(name) == defaults[name]:
                d.pop(name, None)
        for name, legacy in self.KEY_OMIT_AT.items():
            if d.get(name) == legacy:
                d.pop(name, None)
        if d.get("task_def") is not None:
            from embinit.task_defs import canonical
            d["task_def"] = canonical(self.task_def)
        if self._subword_bleu_references():
            d["bleu_references"] = "tokenizer"
        if (tokenize := bleu_tokenizer(target_language(self.task))) != BLEU_DEFAULT:
            d["bleu_tokenize"] = tokenize   # scored with 13a before (embinit.bleu_rules): those runs not reused
        if self._absorption_on_own_pe():
            d["absorption_pe"] = "trial"   # targeted the default PE table before: those runs not reused
        if not self.oov_applies():
            d["oov"] = DEFAULT_OOV   # no row for the rule to fill: one key whatever the rule (oov=xavier's)
        if self._shuffled_subword_rows():
            d["shuffle_subword"] = "permuted"   # kept their own piece means before: those runs not reused
        if d.get("beam_size", 1) <= 1:
            d.pop("length_penalty", None)  # ranks beam hypotheses only: greedy output is the same whatever it is
        else:
            # decoded by a search that let finished hypotheses take live beam slots before (it pruned long
            # ones, embinit.train.decoding.beam_search): those runs' BLEU is not reused; greedy keys unchanged
            d["beam_search"] = "finished_aside"
        d["code_version"] = CODE_VERSION
        return d


# The fields an init's trials may be planned without, where they change nothing it computes (`oov` for a
# table with no rows a rule fills: `TrialConfig.oov_applies`, `spec.planning.moot_axes`): the report takes
# such an init's rows as standing for every value of them (`report.baseline.within`).
MOOT_FIELDS = ("oov",)


def within(axes: dict[str, Any], other: dict[str, Any]) -> bool:
    """Whether `other` is `axes` with, at most, fields its init may be planned without (`MOOT_FIELDS`:
    Xavier under an `oov` axis, planned once): a report row of `axes` stands for every value of those."""
    return all(k in other and other[k] == v for k, v in axes.items()) and set(other) - set(axes) <= set(MOOT_FIELDS)

# What a spec's tasks, inits and seeds set (the trial's identity); every other TrialConfig field is a
# hyperparameter a spec may set per task, in `defaults`, as an ablation axis or in a search space.
IDENTITY_FIELDS = ("task", "init", "seed", "src_init", "pretrained", "src_pretrained", "data_dir", "data_revision",
                   "task_def")
HYPERPARAMETERS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(TrialConfig)
                                         if f.name not in IDENTITY_FIELDS)

# The hyperparameters `config_problems` reads besides the task: the spec's check varies exactly these over
# its axes and search space (a rule reading another field must add it here).
RULE_FIELDS = ("train_embeddings", "freeze_non_embeddings", "tie_embeddings", "extras", "cuda_graphs", "device",
               "max_tokens")

# The `extras` keys a trial may set, declared once: the trainers' switches (translation: greedy BLEU on
# the validation set each epoch, `<unk>` dropped from BLEU hypotheses), then the keyword arguments of
# `embinit.tasks.load_task` that a trial passes through (tests/test_task_contract.py checks them against
# its signature). An unknown key is a spec problem, not a failed trial.
TRAINER_EXTRAS = ("val_bleu", "bleu_drop_unk")
LOADER_EXTRAS = ("eval_split", "lowercase", "noise", "seed", "train_split")


def config_problems(cfg: TrialConfig) -> list[str]:
    """What no trial may combine, one message per broken rule ([] when none): the rules across fields,
    declared once. The trainer's `check_config` refuses a trial that breaks one; the spec's check
    (`embinit.spec.checks`) applies them to every trial a spec plans, before any starts."""
    problems = []
    if not cfg.train_embeddings and cfg.freeze_non_embeddings:
        problems.append("train_embeddings=False with freeze_non_embeddings=True leaves nothing to train")
    if cfg.tie_embeddings and not task_kind(cfg.task).stream:
        problems.append(f"tie_embeddings applies to language models only; {cfg.task!r} is a "
                        f"{task_defaults(cfg.task).kind} task")
    if (problem := tokenizer_problem(target_language(cfg.task))) is not None:
        problems.append(f"{cfg.task}: {problem}")
    return problems + graphs_problems(cfg) + extras_problems(cfg.task, cfg.extras)


def data_revision_problems(cfg: TrialConfig) -> list[str]:
    """What `data_revision` (a pin of the task's hub dataset) needs: a revision's shape, a task read from the
    hub (not generated, not defined in a spec: those have no hub copy) and no data folder (one given is
    read, not the hub). The trainer's `check_config` and the spec's check (per task entry) apply it."""
    from embinit.hf_cache import pin_problem
    if cfg.data_revision is None:
        return []
    if (problem := pin_problem(cfg.data_revision)) is not None:
        return [f"data_revision: {problem}"]
    entry, pin = task_entry(cfg.task), f"data_revision {cfg.data_revision!r}"
    if entry.generate:
        return [f"{pin} pins a hub dataset, but {cfg.task!r} is generated, not read from the hub: leave it out"]
    if entry.hub is None:
        return [f"{pin} pins a hub dataset, but {cfg.task!r} has no copy on the hub (a task defined in a spec "
                f"reads its data folder only): leave it out"]
    if cfg.data_dir is not None:
        return [f"{pin} pins {cfg.task}'s hub dataset, but the task reads its data folder {cfg.data_dir!r} "
                f"(data_dir), not the hub: leave out one of them"]
    return []


def graphs_problems(cfg: TrialConfig) -> list[str]:
    """What `cuda_graphs: true` needs: a switch's value, a CUDA device, a task kind with a graphed step,
    batches of a fixed number of rows. A device of `auto` is checked where it resolves (the trainer)."""
    if cfg.cuda_graphs is False:
        return []
    if not isinstance(cfg.cuda_graphs, bool):
        return [f"cuda_graphs is a switch: true or false, got {cfg.cuda_graphs!r}"]
    problems = []
    if str(cfg.device).startswith("cpu"):
        problems.append(f"cuda_graphs=True needs a CUDA device, but device is {cfg.device!r}: set device to "
                        f"cuda (or auto on a GPU machine), or cuda_graphs to false")
    if not task_kind(cfg.task).graphed:
        problems.append(f"cuda_graphs applies to translation tasks only (the kinds with a graphed step); "
                        f"{cfg.task!r} is a {task_defaults(cfg.task).kind} task: set cuda_graphs to false")
    if cfg.max_tokens:
        problems.append("cuda_graphs=True needs batches of batch_size rows, but max_tokens is set (each batch "
                        "its own number of rows): unset max_tokens, or set cuda_graphs to false")
    return problems


def extras_problems(task: str, extras: Any) -> list[str]:
    """Unknown `extras` keys (with the valid ones) and values a switch cannot take."""
    if not extras:
        return []
    if not isinstance(extras, dict):
        return [f"extras must be a mapping of switches, got {type(extras).__name__}"]
    valid = TRAINER_EXTRAS + LOADER_EXTRAS
    problems = [f"unknown extras key {k!r}; valid: {sorted(valid)}{did_you_mean(str(k), valid)}"
                for k in extras if k not in valid]
    problems += [f"extras {k} is a switch: true or false, got {extras[k]!r}"
                 for k in ("val_bleu", "bleu_drop_unk", "lowercase") if k in extras and not isinstance(extras[k], bool)]
    if "noise" in extras:
        try:
            check_noise(task, extras["noise"])
        except EmbinitError as e:
            problems.append(f"extras {e}")
    return problems
