"""One contract suite over every task kind in the task registry (embinit.task_registry), the built-in
kinds and a toy fourth kind registered at run time (tests/helpers/toy_task.py): the `Task` protocol
(embinit.train.task) is met, the loss falls, validation and test give the metrics the registry names,
the best checkpoint and last.pt round-trip, and trial keys are stable."""

import math

import pytest
import torch
from helpers import toy_task

from embinit import config as embinit_config, task_registry
from embinit.config import TrialConfig, metric_range
from embinit.spec import load_spec
from embinit.train import run_trial
from embinit.train import checkpoint as ckpt
from embinit.train.prepare import prepare
from embinit.train.lifecycle import make_task

torch.set_num_threads(1)
BUILTIN = {kind: next(t for t, e in task_registry.TASKS.items() if e.kind == kind and e.generate)
           for kind in task_registry.KINDS}
CASES = {**BUILTIN, toy_task.KIND: toy_task.TASK}
# the keys of TrialConfig(task=...) before the task registry existed: the registry changed no key. They
# were made under code version 1, so they are compared under it (a version bump changes every key).
KEYS_VERSION = "1"
KEYS = {"synthetic_translation": "0b73069fde20c25c", "synthetic_classification": "97bbc8d793af8ca5",
        "synthetic_lm": "df54386992e7a9d3", "multi30k": "da435dcf7592c46e", "iwslt2017": "389a292facbbfac8",
        "sst2": "d038e5090a920449", "mnli": "7d8aec4f906db2b5", "wikitext2": "066ca70060fae737"}
METHODS = ("from_setup", "train_batches", "batch_loss", "validate", "test")


@pytest.fixture(scope="module", autouse=True)
def toy():
    toy_task.register()
    yield
    toy_task.unregister()
    assert toy_task.TASK not in task_registry.TASKS and toy_task.KIND not in task_registry.KINDS


def config(task: str, **kw) -> TrialConfig:
    return TrialConfig(task=task, threads=1, epochs=3, max_train_examples=300, **kw)


@pytest.fixture(scope="module")
def trials(tmp_path_factory):
    """kind -> (config, result, out_dir): one trained trial per kind, shared by the tests below."""
    cache, out = tmp_path_factory.mktemp("cache"), tmp_path_factory.mktemp("runs")
    return {kind: (c := config(task), run_trial(c, out / kind, cache_dir=cache), out / kind, cache)
            for kind, task in CASES.items()}


def test_every_builtin_kind_has_a_generated_task():
    assert set(BUILTIN) == {"translation", "classification", "lm"}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_kind_entry_code_loads(kind):
    entry = task_registry.kind_entry(kind)
    task_cls = task_registry.kind_code(kind, "task")
    assert all(callable(getattr(task_cls, m, None)) for m in METHODS)
    assert callable(task_registry.kind_code(kind, "model").from_tables)
    assert callable(task_registry.kind_code(kind, "build")) and callable(task_registry.kind_code(kind, "text"))
    assert entry.sides and entry.sides[-1] in ("tgt", "tok")


@pytest.mark.parametrize("kind", sorted(CASES))
def test_loss_falls_and_the_registry_metrics_exist(kind, trials):
    cfg, result, _, _ = trials[kind]
    entry = task_registry.task_entry(cfg.task)
    assert result.status == "finished" and result.best_epoch is not None
    assert result.history[-1]["train/loss"] < result.history[0]["train/loss"]
    assert all(entry.selection[0] in h and entry.curve in h for h in result.history)
    # the trainer's checkpoint criterion is the registry's selection metric (Tune, Optuna and the report
    # select by the registry's; best.pt and test/* follow the trainer's)
    metric, mode = entry.selection
    assert next(iter(result.best)) == metric and result.best[f"{metric}_epoch"] == result.best_epoch
    values = [h[metric] for h in result.history]
    assert result.history[values.index((min if mode == "min" else max)(values))]["epoch"] == result.best_epoch
    # every metric the registry says the trainer tracks (a search may select by it) has its best logged
    assert {m for m, _ in task_registry.tracked_metrics(cfg.task)} <= set(result.best), result.best
    logged = {**result.test, **{f"best/{k}": v for k, v in result.best.items()}}
    for name in (entry.primary, *entry.reported):
        low, high = metric_range(name)
        assert name in logged and low <= logged[name] <= high, (name, logged)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_best_checkpoint_and_last_round_trip(kind, trials):
    cfg, result, out, cache = trials[kind]
    s = prepare(cfg, cache)
    s.model.load_state_dict(ckpt.load_best(out / ckpt.BEST)["model"])
    task = make_task(s)
    best = result.history[result.best_epoch - 1]
    for name, value in task.validate(s.model).items():
        assert value == pytest.approx(best[name], rel=1e-5, abs=1e-6), name
    again = task.test(s.model)
    assert again.keys() == {k for k in result.test if not k.startswith("oov/")} | (
        {"test/bleu_signature"} if result.bleu_signature else set())
    for name, value in again.items():
        if isinstance(value, float) and math.isfinite(value):
            assert value == pytest.approx(result.test[name], rel=1e-5, abs=1e-6), name
    resumed = run_trial(cfg, out, cache_dir=cache)   # from last.pt: nothing left to train
    assert [h["train/loss"] for h in resumed.history] == [h["train/loss"] for h in result.history]
    assert resumed.best_epoch == result.best_epoch and resumed.test == result.test


@pytest.mark.parametrize("kind", sorted(CASES))
def test_trial_keys_are_stable(kind, monkeypatch):
    task = CASES[kind]
    key = TrialConfig(task=task).key()
    assert key == TrialConfig.from_dict(TrialConfig(task=task).to_dict()).key()
    assert key == TrialConfig(task=task, threads=3, device="cpu").key()
    assert key != TrialConfig(task=task, seed=1).key()
    spec = load_spec({"name": "contract", "tasks": [task], "inits": ["xavier"], "seeds": [0]})
    assert [t.key for t in spec.plan()] == [key]
    monkeypatch.setattr(embinit_config, "CODE_VERSION", KEYS_VERSION)
    assert TrialConfig(task=task).key() == KEYS.get(task, TrialConfig(task=task).key())


def test_builtin_keys_unchanged_but_for_the_code_version(monkeypatch):
    now = {task: TrialConfig(task=task).key() for task in KEYS}
    assert not set(now.values()) & set(KEYS.values())          # another version: no old run is reused
    monkeypatch.setattr(embinit_config, "CODE_VERSION", KEYS_VERSION)
    assert {task: TrialConfig(task=task).key() for task in KEYS} == KEYS


def test_toy_kind_reads_as_a_task_everywhere():
    assert task_registry.primary_metric(toy_task.TASK) == "test/exact"
    assert task_registry.curve_metric(toy_task.TASK) == "val/exact"
    assert metric_range("test/exact") == (0.0, 1.0)
    assert not task_registry.task_kind(toy_task.TASK).fusable


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_fused_group_of_one_is_the_trial_s_own_step(kind, trials):
    """Every built-in kind fuses: its `fused` model fed by its Task's `fused_loss` gives, for a group of
    one, the Task's own `batch_loss` (dropout on, the same dropout stream) and every weight's gradient.
    A kind registered without a fused model (the toy kind) does not fuse."""
    entry = task_registry.kind_entry(kind)
    cfg, _, _, cache = trials[kind]
    if kind not in BUILTIN:
        assert not entry.fusable
        return
    assert entry.fusable
    s = prepare(cfg, cache)
    task = make_task(s)
    batch = task.train_batches(torch.Generator().manual_seed(0))[0]
    state = s.dropout_generator.get_state()
    s.model.train()
    loss, n_targets, n_tokens = task.batch_loss(s.model, batch)
    loss.backward()
    assert (n_targets, n_tokens) == (batch["n_targets"], batch["n_tokens"])
    s.dropout_generator.set_state(state)
    fused = task_registry.kind_code(kind, "fused")([s.model], [s.dropout_generator])
    fused.train()
    losses, (separate, stacked) = task.fused_loss(fused, [batch])
    losses.sum().backward()
    assert losses.shape == (1,) and losses[0].item() == pytest.approx(loss.item(), rel=1e-6)
    assert separate == stacked > 0
    own = dict(s.model.named_parameters())
    for name, p in zip(fused.names, fused.stacked()):
        if p.requires_grad:
            assert torch.allclose(p.grad[0], own[name].grad, rtol=1e-4, atol=1e-6), name


def test_the_declared_loader_extras_are_the_load_task_switches_a_trial_does_not_set():
    """`config.LOADER_EXTRAS` (what the spec check accepts in `extras` besides the trainers' switches)
    is exactly load_task's keyword arguments that a trial's own fields do not fill."""
    import inspect

    from embinit.config import LOADER_EXTRAS
    from embinit.tasks import load_task
    set_by_the_trial = {"task", "data_dir", "data_revision", "tokenizer", "min_freq", "max_train_examples", "max_len",
                        "cache_dir"}
    assert set(LOADER_EXTRAS) == set(inspect.signature(load_task).parameters) - set_by_the_trial

