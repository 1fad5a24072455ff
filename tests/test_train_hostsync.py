"""The training step never waits for the device: losses are read every N steps, sizes come from the
host-side batch. Checked on CPU by recording the aten ops that read a device value back to the host
(`_local_scalar_dense`: .item(), int(), bool(); `nonzero`: boolean-mask indexing), with the CPU-only
shortcut in `padding_mask` switched off as on an accelerator. Divergence is still found, with its step."""

import math
from types import SimpleNamespace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from embinit.config import TrialConfig
from embinit.models import embedding
from embinit.train import loop
from embinit.train.callbacks import TrainContext
from embinit.train.prepare import cpu_has_bf16, prepare, resolve_precision
from embinit.train.lifecycle import make_optimizer, make_task

SYNC_OPS = ("_local_scalar_dense", "nonzero", "masked_select", "is_nonzero")


class HostReads(TorchDispatchMode):
    """Counts aten ops that make the host wait for a device value."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name in SYNC_OPS:
            self.ops.append(name)
        elif name == "index" and any(getattr(i, "dtype", None) == torch.bool for i in args[1] if i is not None):
            self.ops.append("bool-index")
        return func(*args, **(kwargs or {}))


@pytest.fixture
def as_on_gpu(monkeypatch):
    monkeypatch.setattr(embedding, "cheap_host_reads", lambda device: False)


def setup(task, tmp_path, **kw):
    size = 1 if task == "synthetic_lm" else 8    # an LM batch is whole chunks of the token stream
    s = prepare(TrialConfig(task=task, threads=1, epochs=1, max_train_examples=96, batch_size=size, **kw),
                cache_dir=tmp_path)
    return s, make_task(s)


@pytest.mark.parametrize("task", ["synthetic_translation", "synthetic_classification", "synthetic_lm"])
def test_training_steps_read_the_device_once_per_window(task, tmp_path, as_on_gpu):
    s, t = setup(task, tmp_path)
    batches = t.train_batches(torch.Generator().manual_seed(0))[:12]
    assert len(batches) == 12
    opt = make_optimizer([p for p in s.model.parameters() if p.requires_grad], 1e-3)
    ctx = TrainContext(cfg=s.cfg, model=s.model, data=s.data, out_dir=None)
    seen = []
    cb = SimpleNamespace(on_step_end=lambda ctx, step, loss: seen.append((step, loss)))
    with HostReads() as reads:
        stats = loop.train_epoch(s.model, batches, t, opt, ctx, [cb], t.autocast, sync_every=5)
    # 12 steps, windows of 5: reads after steps 5 and 10 (before their update) and at the end
    assert reads.ops == [], reads.ops   # the window reads go through .tolist(), one transfer each
    assert stats.diverged_step is None and ctx.step == 12 and stats.tokens > 0
    # the callback sees the last loss read: NaN before the first read, then fresh at steps 5 and 10
    assert [st for st, _ in seen] == list(range(1, 13))
    assert all(math.isnan(v) for _, v in seen[:4]) and not any(math.isnan(v) for _, v in seen[4:])
    assert seen[4][1] == seen[8][1] and seen[9][1] != seen[4][1]


def test_loss_is_the_same_whichever_the_window(tmp_path):
    """Reading every step (CPU default) or every 5 steps gives the same epoch loss and counts."""
    out = []
    for every in (1, 5):
        s, t = setup("synthetic_translation", tmp_path, seed=3)
        batches = t.train_batches(torch.Generator().manual_seed(0))[:7]
        opt = make_optimizer(list(s.model.parameters()), 1e-3)
        ctx = TrainContext(cfg=s.cfg, model=s.model, data=s.data, out_dir=None)
        out.append(loop.train_epoch(s.model, batches, t, opt, ctx, [], t.autocast, sync_every=every))
    assert out[0].loss == pytest.approx(out[1].loss, rel=1e-6) and out[0].tokens == out[1].tokens


@pytest.mark.parametrize("every, bad_step", [(1, 6), (4, 6), (4, 8), (10, 3)])
def test_divergence_is_reported_with_its_exact_step(every, bad_step, tmp_path):
    s, t = setup("synthetic_translation", tmp_path)
    batches = t.train_batches(torch.Generator().manual_seed(0))[:10]
    opt = make_optimizer(list(s.model.parameters()), 1e-3)
    ctx = TrainContext(cfg=s.cfg, model=s.model, data=s.data, out_dir=None)

    class Blowup:
        def on_step_end(self, ctx, step, loss):
            if step == bad_step - 1:
                with torch.no_grad():
                    ctx.model.tgt_embed.embedding.weight.mul_(1e30)

    stats = loop.train_epoch(s.model, batches, t, opt, ctx, [Blowup()], t.autocast, sync_every=every)
    assert stats.diverged_step == bad_step
    assert stats.loss == stats.loss and stats.loss > 0   # the mean over the finite steps before it
    # the epoch stops at the first read after the bad step: within one window of it
    assert bad_step <= ctx.step + 1 <= bad_step + every


def test_evaluation_reads_the_device_once(tmp_path, as_on_gpu):
    s, t = setup("synthetic_translation", tmp_path)
    batches = t.eval_batches("val")[:6]   # built on the host beforehand, as the trainer caches them
    with HostReads() as reads:
        value = loop.mean_loss(s.model, batches, t, t.autocast)
    assert value > 0 and reads.ops.count("_local_scalar_dense") == 1 and "nonzero" not in reads.ops


def test_auto_precision_follows_the_machine():
    cpu = torch.device("cpu")
    assert resolve_precision("auto", cpu, "flags : fpu avx512f avx512_bf16") == "bf16"
    assert resolve_precision("auto", cpu, "flags : fpu avx512f amx_bf16") == "bf16"
    assert resolve_precision("auto", cpu, "flags : fpu avx2 avx512f") == "fp32"
    assert resolve_precision("fp32", cpu, "flags : avx512_bf16") == "fp32"
    assert resolve_precision("bf16", cpu, "flags : avx2") == "bf16"
    assert cpu_has_bf16("avx512_bf16x") is False


def test_auto_precision_is_recorded_resolved(tmp_path):
    s, _ = setup("synthetic_translation", tmp_path, precision="auto")
    assert s.cfg.precision == ("bf16" if cpu_has_bf16() else "fp32")
