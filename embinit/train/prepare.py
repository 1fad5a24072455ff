"""Everything before the first step of a trial: resolve the config, load the task, build the embedding
tables and the model. Every user error surfaces here, before any training.

Seeds: one trial seed, split into named streams (`derive_seed`) so the non-embedding weights, each
embedding table, dropout and each epoch's data order have their own generator. Two trials with the same
seed but different inits therefore share every other weight, every dropout mask and the data order
(paired comparisons).
`emb_seed` (when set) replaces the seed for the embedding tables only: trials that differ only in it
differ only in their tables' init (the KNN-similarity post's code).
PE table: a trial's tables are built against its own (`pe_table`: `pe_positions`, `pe_base`), the one
its `emb/absorption` is measured on (embinit.train.lifecycle `emb_stats`), so `rescale=absorption:R`
logs R.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from embinit.bounds import BOUNDS
from embinit.bounds import problem as bound_problem
from embinit.config import LOADER_EXTRAS, PRECISIONS, TrialConfig, task_defaults
from embinit.errors import EmbinitError
from embinit.model_dims import resolve_model_size, side_sources
from embinit.task_registry import kind_code, task_kind
from embinit.models import (ModelConfig, build_model, embedding_parameters,
                            set_dropout_generator, set_trainable)
from embinit.stats import PETable
from embinit.train.checkpoint import read as read_checkpoint



def load_body(model, path: str) -> None:
    """Copy every non-embedding parameter and buffer of the checkpoint `path` (a best.pt or last.pt)
    into `model`, keeping the model's own freshly initialized embedding tables."""
    ckpt = read_checkpoint(path, "init_from checkpoint")   # trusted roots, weights only
    state = ckpt.get("model") if isinstance(ckpt, dict) else None
    if not isinstance(state, dict):
        raise EmbinitError(f"init_from {path} is not an embinit checkpoint (no 'model' state)")
    emb_ids = {id(p) for p in embedding_parameters(model)}
    emb = {name for name, p in model.named_parameters() if id(p) in emb_ids}
    own = model.state_dict()
    body = {k: v for k, v in state.items() if k not in emb}
    missing = sorted(k for k in own if k not in emb and k not in body)
    wrong = sorted(k for k, v in body.items() if k in own and own[k].shape != v.shape)
    if missing or wrong or set(body) - set(own):
        raise EmbinitError(f"init_from {path} does not fit this model: missing {missing[:3]}, "
                           f"shape mismatch {wrong[:3]}, unexpected {sorted(set(body) - set(own))[:3]}")
    model.load_state_dict(body, strict=False)


def derive_seed(seed: int, stream: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{stream}".encode()).digest()[:8], "little") >> 1


def pe_table(cfg: TrialConfig) -> PETable:
    """The trial's PE table: what its tables' absorption targets are set against (`build_table(pe=...)`)
    and what its `emb/absorption` is measured on (lifecycle `emb_stats`), declared once."""
    return PETable(cfg.pe_positions, cfg.pe_base)


def emb_seed(cfg: TrialConfig) -> int:
    """The seed the embedding tables' init draws from: `emb_seed` when set, else the trial seed."""
    return cfg.seed if cfg.emb_seed is None else cfg.emb_seed


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise EmbinitError(f"unknown device {name!r}; use auto, cpu or cuda[:N]") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise EmbinitError(f"device {name!r} requested but CUDA is not available")
    return dev


BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")   # /proc/cpuinfo flags of CPUs with bf16 matrix units


def cpu_has_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU has bf16 dot-product units (AVX512-BF16 or AMX). Without them bf16 matmuls are
    emulated and slower than fp32 (the Intel machines seen so far)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = set(cpuinfo.split())
    return any(f in flags for f in BF16_CPU_FLAGS)


def resolve_precision(precision: str, device: torch.device, cpuinfo: str | None = None) -> str:
    """`auto` -> bf16 where the machine computes it natively (a CUDA GPU with bf16 support, a CPU with
    bf16 units), else fp32. Measured on an AVX512-BF16 EPYC: the bf16 step is faster than fp32 once the
    attention core runs in fp32 (docs/benchmarks.md)."""
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    if device.type == "cpu":
        return "bf16" if cpu_has_bf16(cpuinfo) else "fp32"
    return "fp32"


@dataclass
class Setup:
    cfg: TrialConfig           # resolved: every hyperparameter filled in, d_model and heads included
    data: Any                  # TaskData
    model: torch.nn.Module
    model_cfg: ModelConfig
    tables: dict[str, Any]     # side ("src"/"tgt"/"tok") -> BuildResult
    device: torch.device
    dropout_generator: torch.Generator


def check_config(cfg: TrialConfig) -> TrialConfig:
    """Resolve defaults and reject impossible values (all before loading anything)."""
    from embinit.config import config_problems, data_revision_problems
    task_defaults(cfg.task)  # unknown task -> EmbinitError listing the valid ones
    rc = cfg.resolved()
    problems = []
    if rc.precision not in PRECISIONS:
        problems.append(f"precision must be one of {', '.join(PRECISIONS)}, got {rc.precision!r}")
    # the bounds declared in embinit.bounds (seeds, lr, max_len, sizes, dropout, threads, ...)
    problems += [msg for name in BOUNDS if (msg := bound_problem(name, getattr(rc, name, None)))]
    problems += config_problems(rc)   # the rules across fields, which the spec's check applies too
    problems += data_revision_problems(rc)   # likewise, per task entry
    if problems:
        raise EmbinitError("; ".join(problems))
    return rc


def load_data(cfg: TrialConfig, tokenizer: str, cache_dir):
    from embinit.tasks import load_task  # imported here: the models/training code does not need it

    kwargs = dict(data_dir=cfg.data_dir, data_revision=cfg.data_revision, tokenizer=tokenizer, min_freq=cfg.min_freq,
                  max_train_examples=cfg.max_train_examples, max_len=cfg.max_len, cache_dir=cache_dir)
    # task-specific switches (e.g. wikitext2's train_split/eval_split) are load_task keyword arguments;
    # `check_config` has refused any other key (config.extras_problems)
    kwargs.update({k: v for k, v in (cfg.extras or {}).items() if k in LOADER_EXTRAS})
    return load_task(cfg.task, **kwargs)


def training_text(data, side: str) -> list[list[int]]:
    """A side's training split as id sequences (what the `focus` OOV rule learns its similarities from):
    the kind's `text` function (embinit.tasks.data)."""
    return kind_code(data.kind, "text")(data, side)


def load_inputs(cfg: TrialConfig, cache_dir=None, device: torch.device | None = None):
    """(resolved config, task kind, TaskData, embedding tables): everything `prepare` makes but the
    model. A sweep calls it once per distinct data setting before its trials fan out, so the trials
    find the tokenized task and the aligned pretrained rows in the cache."""
    from embinit.init import build_table, parse_init_spec, source_dim

    rc = check_config(cfg)
    kind = task_defaults(rc.task).kind
    sources = side_sources(rc)
    sides, main_side = list(sources), task_kind(rc.task).sides[-1]
    specs = {s: parse_init_spec(init) for s, (init, _) in sources.items()}
    pretrained = {s: location for s, (_, location) in sources.items()}
    dims = {s: source_dim(specs[s], pretrained[s]) for s in sides}
    d_model, heads = resolve_model_size(rc, cfg.heads, dims)
    rc = dataclasses.replace(rc, d_model=d_model, heads=heads)
    if device is not None:
        rc = dataclasses.replace(rc, precision=resolve_precision(rc.precision, device))
    data = load_data(rc, rc.tokenizer_for(specs[main_side]), cache_dir)
    if data.kind != kind:
        raise EmbinitError(f"task {rc.task!r} loaded as {data.kind!r} data, expected {kind!r}")
    vocabs = {"tgt": data.vocab, "tok": data.vocab, "src": data.src_vocab}
    tables = {s: build_table(specs[s], vocabs[s], dim=d_model, pretrained=pretrained[s], oov=rc.oov,
                             generator=torch.Generator().manual_seed(derive_seed(emb_seed(rc), f"emb:{s}")),
                             cache_dir=cache_dir, corpus=training_text(data, s) if rc.oov == "focus" else None,
                             pe=pe_table(rc))
              for s in sides}
    return rc, kind, data, tables


def prepare(cfg: TrialConfig, cache_dir=None) -> Setup:
    device = pick_device(check_config(cfg).device)
    if cfg.cuda_graphs and device.type != "cuda":   # device "auto" on a machine without CUDA
        raise EmbinitError(f"cuda_graphs=True needs a CUDA device, but device {cfg.device!r} is {device} here: "
                           f"run it on a GPU machine, or set cuda_graphs to false")
    rc, kind, data, tables = load_inputs(cfg, cache_dir, device)
    # sequences are truncated to max_len ids; <bos>/<eos> (and a pair's separator) need room beyond it
    model_cfg = ModelConfig(d_model=rc.d_model, heads=rc.heads, layers=rc.layers, ff_dim=rc.ff_dim,
                            dropout=rc.dropout, attention_dropout=rc.attention_dropout,
                            activation_dropout=rc.activation_dropout, max_positions=2 * rc.max_len + 2,
                            pe_base=rc.pe_base, pe_positions=rc.pe_positions,
                            pre_ln=rc.pre_ln, pos_encoding=rc.pos_encoding,
                            tie_embeddings=rc.tie_embeddings)
    g_model = torch.Generator().manual_seed(derive_seed(rc.seed, "model"))
    model = build_model(kind, {s: t.table for s, t in tables.items()}, model_cfg,
                        num_labels=data.num_labels or 0, generator=g_model)
    if rc.init_from:
        load_body(model, rc.init_from)
    set_trainable(model, rc.train_embeddings, rc.freeze_non_embeddings)
    model.to(device)
    g_drop = torch.Generator(device=device).manual_seed(derive_seed(rc.seed, "dropout"))
    set_dropout_generator(model, g_drop)
    return Setup(rc, data, model, model_cfg, tables, device, g_drop)
