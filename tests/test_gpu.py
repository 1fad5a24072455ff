"""The GPU path, on a real CUDA device (skipped without one; `gpu` marker). Run on a GPU machine with

    python -m pytest -m gpu -q tests/test_gpu.py

Reproducibility: with `torch.use_deterministic_algorithms(True)` and CUBLAS_WORKSPACE_CONFIG=:4096:8
(set below, before CUDA starts), the same seed twice gives the same metrics to a relative 1e-6 (the
trainer's dropout masks come from a seeded CUDA generator; batches and weights from seeded CPU ones).

EMBINIT_TEST_GPU_DEVICE=cpu runs the same tests on the CPU: the rehearsal of a device call
(bench/gpu_stretch.sh), so that no GPU minute goes to an import error or a broken test.
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")   # deterministic cuBLAS (before CUDA init)

from embinit.config import TrialConfig
from embinit.train import run_trial

DEVICE = os.environ.get("EMBINIT_TEST_GPU_DEVICE", "cuda")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(), reason="needs a CUDA GPU")]

TIMING = ("tokens_per_s", "time_s")
REL = 1e-6


def small(**kw):
    """38 steps an epoch: 3 epochs take the train loss from ~3.6 to ~2.6 (first measured on the CPU)."""
    return TrialConfig(**{"task": "synthetic_translation", "epochs": 3, "max_train_examples": 600, "batch_size": 16,
                          "device": DEVICE, "seed": 0, **kw})


@pytest.fixture
def deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)


def metrics(result):
    return [{k: v for k, v in h.items() if k not in TIMING} for h in result.history] + [result.test]


def assert_learns_and_repeats(a, b) -> None:
    """Trial `a` finished and learned (train loss down 20%, validation loss down), and `b`, the same seed
    again, has the same metrics to REL."""
    assert a.status == "finished"
    h = a.history
    assert h[-1]["train/loss"] < 0.8 * h[0]["train/loss"] and h[-1]["val/loss"] < h[0]["val/loss"]
    for x, y in zip(metrics(a), metrics(b)):
        assert x.keys() == y.keys()
        for k in x:
            if isinstance(x[k], float):
                assert y[k] == pytest.approx(x[k], rel=REL), k
            else:
                assert y[k] == x[k], k


def test_translation_trial_trains_on_cuda_and_repeats(tmp_path, deterministic):
    a = run_trial(small(), cache_dir=tmp_path)
    b = run_trial(small(), cache_dir=tmp_path)
    assert a.info["device"].startswith(DEVICE)
    assert_learns_and_repeats(a, b)


def test_attention_and_activation_dropout_train_and_repeat_on_cuda(tmp_path, deterministic):
    """The written-out attention with dropout on its weights, and the feed-forward activation's dropout,
    draw from the trial's seeded generator on the device too: the same seed twice, the same metrics."""
    kw = {"dropout": 0.0, "attention_dropout": 0.1, "activation_dropout": 0.1}
    a = run_trial(small(**kw), cache_dir=tmp_path)
    b = run_trial(small(**kw), cache_dir=tmp_path)
    assert_learns_and_repeats(a, b)
    plain = run_trial(small(dropout=0.0, epochs=1), cache_dir=tmp_path)
    assert plain.history[0]["train/loss"] != pytest.approx(a.history[0]["train/loss"], rel=1e-4)


def test_bf16_autocast_trains_on_cuda(tmp_path):
    r = run_trial(small(precision="bf16"), cache_dir=tmp_path)
    assert r.status == "finished" and r.config["precision"] == "bf16"
    assert r.history[-1]["train/loss"] < 0.8 * r.history[0]["train/loss"]
    auto = run_trial(small(precision="auto", epochs=1), cache_dir=tmp_path)
    if DEVICE == "cuda":
        assert auto.config["precision"] == ("bf16" if torch.cuda.is_bf16_supported() else "fp32")


def test_fused_attention_layout_matches_on_cuda():
    """head_dim 30 (D=300, 10 heads) is zero-padded to 32 for the fused kernels: same result."""
    from embinit.models.layers import attend
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(4, 10, 17, 30, generator=g).to(DEVICE) for _ in range(3))
    mask = torch.ones(4, 1, 1, 17, dtype=torch.bool, device=DEVICE)
    mask[:, :, :, 12:] = False
    for m, causal in ((mask, False), (None, True)):
        padded = attend(q, k, v, m, causal, pad_heads=True)
        plain = attend(q, k, v, m, causal, pad_heads=False)
        torch.testing.assert_close(padded, plain, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(DEVICE != "cuda", reason="cuDNN attention exists on CUDA only")
def test_bf16_attention_keeps_off_the_cudnn_kernel():
    """cuDNN's attention plans every new shape anew (~11 ms of host time a call on an H200, PyTorch 2.11):
    `attend` keeps to the flash and memory-efficient kernels, forward and backward, in bf16 too."""
    from torch.profiler import ProfilerActivity, profile
    from embinit.models.layers import attend
    mask = torch.ones(8, 1, 1, 23, dtype=torch.bool, device="cuda")
    mask[:4, :, :, 17:] = False
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for length in (23, 19, 11):               # new shapes, as batches of sentences bring
            q, k, v = (torch.randn(8, 10, length, 30, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                       for _ in range(3))
            attend(q, k, v, mask[..., :length], False).sum().backward()
            attend(q, k, v, None, True).sum().backward()
    names = {e.key for e in prof.key_averages()}
    assert not [n for n in names if "cudnn_attention" in n], sorted(names)
    assert [n for n in names if "efficient_attention" in n or "flash_attention" in n], sorted(names)


def test_knn_and_probe_on_cuda_equal_cpu():
    from embinit.analysis.neighbours import knn
    from embinit.analysis.probe import probe_table
    g = torch.Generator().manual_seed(0)
    table = torch.randn(3000, 64, generator=g)
    for neighbours in ("dot", "cosine"):
        v_cpu, i_cpu = knn(table, 10, neighbours, block_size=1024)
        v_gpu, i_gpu = knn(table.to(DEVICE), 10, neighbours, block_size=1024)
        assert i_gpu.device.type == DEVICE and torch.equal(i_gpu.cpu(), i_cpu)
        torch.testing.assert_close(v_gpu.cpu(), v_cpu, rtol=1e-5, atol=1e-5)
    cpu, gpu = probe_table(table, n_samples=4000), probe_table(table.to(DEVICE), n_samples=4000)
    assert cpu.keys() == gpu.keys()
    for k in cpu:
        assert gpu[k] == pytest.approx(cpu[k], rel=1e-6, abs=1e-9), k


@pytest.mark.slow
def test_sweep_puts_four_trials_on_one_gpu(tmp_path):
    """resources: {gpus: 0.25}: 4 trials at once on the one GPU, each MLflow run tagged with cuda."""
    from helpers.gpu_share import four_on_one_gpu
    devices, met = four_on_one_gpu(tmp_path, DEVICE, num_cpus=4)
    assert all(d.startswith(DEVICE) for d in devices)
    assert met == [True] * 4


def test_fused_members_are_their_separate_trials_on_cuda(tmp_path):
    """Fused execution on the GPU (losses read every 25 steps): each member matches its separate CUDA
    trial to float tolerance, and a member that diverges at step 1 is reported with that exact step
    while the others go on."""
    from embinit.tasks.synthetic import LEXICON
    from embinit.train.fused import run_fused
    words = sorted(set(LEXICON.values()))
    huge = tmp_path / "huge.txt"
    huge.write_text("".join(f"{w} " + " ".join(["1e30"] * 16) + "\n" for w in words))
    kw = {"epochs": 2, "max_train_examples": 200, "d_model": 16, "heads": 2, "ff_dim": 32, "dropout": 0.1,
          "extras": {"val_bleu": False}}
    cfgs = [small(seed=0, **kw), small(seed=1, init="normal", **kw),
            small(seed=0, init="glove", pretrained=str(huge), **kw)]
    fused = run_fused(cfgs, cache_dir=tmp_path / "c")
    assert (fused[2].status, fused[2].diverged_step) == ("diverged", 1)
    for c, f in zip(cfgs[:2], fused[:2]):
        sep = run_trial(c, cache_dir=tmp_path / "c")
        assert f.info["execution"]["mode"] == "fused" and f.status == sep.status == "finished"
        for a, b in zip(sep.history, f.history):
            assert a["val/loss"] == pytest.approx(b["val/loss"], rel=1e-4)
        for name, value in sep.test.items():
            assert f.test[name] == pytest.approx(value, rel=1e-4), name


def _members_are_separate_trials(cfgs, tmp_path):
    """Each fused member's validation curve is its separate trial's to float tolerance."""
    from embinit.train.fused import run_fused
    fused = run_fused(cfgs, cache_dir=tmp_path / "c")
    for c, f in zip(cfgs, fused):
        sep = run_trial(c, cache_dir=tmp_path / "c")
        assert f.info["execution"]["mode"] == "fused" and f.status == sep.status == "finished"
        for a, b in zip(sep.history, f.history):
            assert a["val/loss"] == pytest.approx(b["val/loss"], rel=1e-4)


def test_fused_members_with_attention_and_activation_dropout_are_their_separate_trials_on_cuda(tmp_path):
    """Each member draws its attention-weight and activation masks from its own generator on the device."""
    kw = {"epochs": 2, "max_train_examples": 200, "d_model": 16, "heads": 2, "ff_dim": 32, "dropout": 0.0,
          "attention_dropout": 0.2, "activation_dropout": 0.2, "extras": {"val_bleu": False}}
    cfgs = [small(seed=0, **kw), small(seed=1, init="normal", **kw)]
    _members_are_separate_trials(cfgs, tmp_path)


@pytest.mark.parametrize("task", ["synthetic_classification", "synthetic_lm"])
def test_fused_classifiers_and_lms_are_their_separate_trials_on_cuda(tmp_path, task):
    """The classification and LM fused models on the GPU (masks always built, losses read every 25
    steps): each member's validation curve is its separate CUDA trial's to float tolerance."""
    kw = {"task": task, "epochs": 2, "max_train_examples": 200, "d_model": 16, "heads": 2, "ff_dim": 32,
          "dropout": 0.1}
    cfgs = [small(seed=0, **kw), small(seed=1, **kw), small(seed=0, init="normal", **kw)]
    _members_are_separate_trials(cfgs, tmp_path)


# CUDA graphs (`cuda_graphs: true`, embinit.train.graphed) ------------------------------------------------
graphs_only = pytest.mark.skipif(DEVICE != "cuda", reason="CUDA graphs need a CUDA device (EMBINIT_TEST_GPU_DEVICE "
                                 "is cpu: the rehearsal runs the other tests)")


class PaddedEagerStep:
    """The graphed step's computation without the graphs: each batch padded to its bucket, the same loss
    (`graphed_loss`), backward and capturable Adam, run eagerly. What a graph replays, so a graphed trial
    must match it step for step."""

    def __init__(self, model, optimizer, rows):
        self.model, self.optimizer, self.rows = model, optimizer, rows

    def __call__(self, batch):
        from embinit.train.graphed import bucket_shape, graphed_loss, pad_batch
        host = pad_batch(batch, bucket_shape(batch, self.rows, self.model.cfg.max_positions))
        dev = {k: v.to(DEVICE) for k, v in host.items()}
        n = torch.tensor(float(batch["n_targets"]), device=DEVICE)
        self.optimizer.zero_grad(set_to_none=False)
        loss = graphed_loss(self.model, dev["src"], dev["tgt_in"], dev["targets"], n)
        loss.backward()
        self.optimizer.step()
        return loss.detach(), batch["n_targets"], batch["n_tokens"]


def _epochs(tmp_path, graphed: bool, epochs: int = 2):
    """`epochs` epochs of one dropout-free trial through `train_epoch`, with the graphed step or the padded
    eager one: per epoch (train loss, validation metrics), and the step object."""
    from embinit.train.graphed import GraphedStep
    from embinit.train.lifecycle import epoch_batches, start
    from embinit.train.loop import train_epoch
    from embinit.train.prepare import prepare
    cfg = small(dropout=0.0, cuda_graphs=True, extras={"val_bleu": False})
    m = start(cfg, prepare(cfg, tmp_path), None, (), resume=False)
    step = GraphedStep.for_member(m) if graphed else PaddedEagerStep(m.model, m.optimizer, m.s.cfg.batch_size)
    out = []
    for epoch in range(1, epochs + 1):
        stats = train_epoch(m.model, epoch_batches(m, epoch), m.task, m.optimizer, m.ctx, [], m.task.autocast,
                            step=step)
        assert stats.diverged_step is None
        out.append((stats.loss, stats.tokens, m.task.validate(m.model)))
    return out, step


@graphs_only
def test_graphed_steps_are_the_padded_eager_steps(tmp_path, deterministic):
    """Dropout 0: the replays compute what the same padded steps compute eagerly (same kernels), epoch
    losses and validation loss to 1e-6; buckets are captured once each and reused."""
    graphed, step = _epochs(tmp_path, graphed=True)
    eager, _ = _epochs(tmp_path, graphed=False)
    for (gl, gt, gv), (el, et, ev) in zip(graphed, eager):
        assert gt == et and gl == pytest.approx(el, rel=REL)
        assert gv["val/loss"] == pytest.approx(ev["val/loss"], rel=REL)
    steps = 2 * 38
    assert 0 < len(step.buckets) < steps / 4 and step.capture_seconds.keys() == step.buckets.keys()
    assert all(rows == 16 and s % 8 == 0 and t % 8 == 0 for rows, s, t in step.buckets)


@graphs_only
def test_a_graphed_trial_without_dropout_is_the_eager_trial(tmp_path, deterministic):
    """Dropout 0: bucket padding changes only the float order (pad keys are masked, pad targets and rows
    add nothing), so the graphed trial's curve is the eager trial's to 1e-4, under another trial key."""
    kw = {"dropout": 0.0, "extras": {"val_bleu": False}}
    eager = run_trial(small(**kw), cache_dir=tmp_path)
    graphed = run_trial(small(cuda_graphs=True, **kw), cache_dir=tmp_path)
    assert graphed.status == eager.status == "finished" and graphed.key != eager.key
    assert graphed.config["cuda_graphs"] is True and graphed.info["device"].startswith("cuda")
    for a, b in zip(eager.history, graphed.history):
        assert b["train/loss"] == pytest.approx(a["train/loss"], rel=1e-4)
        assert b["val/loss"] == pytest.approx(a["val/loss"], rel=1e-4)
    assert graphed.test["test/loss"] == pytest.approx(eager.test["test/loss"], rel=1e-4)


@graphs_only
def test_a_graphed_trial_with_dropout_repeats_and_learns(tmp_path, deterministic):
    """Dropout on: each replay draws fresh masks from the trial's seeded generator, so the same seed twice
    gives the same metrics (1e-6) and the loss falls as the eager trial's does."""
    a = run_trial(small(cuda_graphs=True), cache_dir=tmp_path)
    b = run_trial(small(cuda_graphs=True), cache_dir=tmp_path)
    assert_learns_and_repeats(a, b)
    other = run_trial(small(cuda_graphs=True, seed=1, epochs=1), cache_dir=tmp_path)
    assert other.history[0]["train/loss"] != pytest.approx(a.history[0]["train/loss"], rel=REL)


@graphs_only
def test_a_graphed_trial_with_attention_and_activation_dropout_repeats_and_learns(tmp_path, deterministic):
    """The graphs register the trial's generator: the attention-weight and activation masks, drawn from it
    as every other mask, are fresh at each replay and the same for the same seed."""
    kw = {"cuda_graphs": True, "attention_dropout": 0.1, "activation_dropout": 0.1}
    a = run_trial(small(**kw), cache_dir=tmp_path)
    b = run_trial(small(**kw), cache_dir=tmp_path)
    assert_learns_and_repeats(a, b)


@graphs_only
def test_a_graphed_trial_reports_divergence_at_its_step(tmp_path):
    """A blow-up after step 29 makes step 30's loss inf/NaN: reported as step 30 (reads every 25 steps)."""
    class Blowup:
        def on_step_end(self, ctx, step, loss):
            if step == 29:
                with torch.no_grad():
                    ctx.model.tgt_embed.embedding.weight.mul_(1e30)

    r = run_trial(small(cuda_graphs=True, epochs=1), callbacks=(Blowup(),), cache_dir=tmp_path)
    assert r.status == "diverged" and r.diverged_step == 30
