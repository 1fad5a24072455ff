"""Prepare once per sweep: before the trials fan out, tokenize each task and build each aligned
pretrained table once, into the cache every worker reads (`embinit.tasks.cache`, `embinit.init.cache`,
keyed by file content).

Without it, N trials starting together on a cold cache would each tokenize the same data (measured on
a GPU node: 12 trials, ~50 s each before the first step). The cache's per-entry lock alone would already
make them wait for one builder; preparing first also keeps the workers' GPUs from idling behind it.

Trials that differ only in what the caches do not hold (seed, learning rate, model sizes, ...) share
one preparation. A setting that fails here (a missing file, ...) is skipped: its trials report the
error themselves, as they would without this step.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from embinit.errors import EmbinitError

# TrialConfig fields that change neither the tokenized task nor the aligned pretrained rows
_IRRELEVANT = ("seed", "data_seed", "init_from", "lr", "epochs", "batch_size", "max_tokens", "layers",
               "emb_seed", "pe_positions", "ff_dim", "dropout", "attention_dropout", "activation_dropout",
               "pe_base", "pre_ln", "pos_encoding", "train_embeddings",
               "freeze_non_embeddings", "early_stopping_patience", "beam_size", "length_penalty", "precision",
               "threads", "device", "heads")


def data_key(cfg) -> str:
    """The part of a trial config its cache entries depend on (a coarse superset is harmless)."""
    d = {k: v for k, v in cfg.to_dict().items() if k not in _IRRELEVANT}
    return repr(sorted(d.items()))


def distinct_configs(configs: list) -> list:
    """One config per data key, in first-seen order."""
    seen: dict[str, Any] = {}
    for cfg in configs:
        seen.setdefault(data_key(cfg), cfg)
    return list(seen.values())


def prepare_configs(configs: list, cache_dir=None) -> dict[str, Any]:
    """Warm the caches for `configs` (TrialConfigs) on this machine; returns what was done."""
    from embinit.train.prepare import load_inputs
    done, skipped = 0, []
    for cfg in distinct_configs(configs):
        try:
            load_inputs(dataclasses.replace(cfg, device="cpu"), cache_dir)
            done += 1
        except EmbinitError as e:
            skipped.append(f"{cfg.task}/{cfg.init}: {e}")
    return {"prepared": done, "skipped": skipped}


def prepare_units(units: list, cache_dir=None) -> dict[str, Any]:
    from embinit.config import TrialConfig
    return prepare_configs([TrialConfig.from_dict(t.config) for u in units for t in u.trials], cache_dir)


def prepare_on_ray(units: list, cache_dir=None) -> dict[str, Any]:
    """Run `prepare_units` as one Ray task (one CPU), so it reads the files where the workers do."""
    import ray
    return ray.get(ray.remote(num_cpus=1, num_gpus=0)(prepare_units).remote(units, cache_dir))
