"""The CUDA-graphed step's CPU-checkable parts (embinit.train.graphed): the shape buckets, the padded
batch, the loss formulation without data-dependent sizes (equal to `batch_loss`, gradients too), the
step hook of `train_epoch`, and the `cuda_graphs` setting (its checks, the trial key). The captured
graphs themselves are tested in tests/test_gpu.py."""

from __future__ import annotations

import contextlib
import dataclasses
from types import SimpleNamespace

import pytest
import torch

from embinit.config import TrialConfig, config_problems
from embinit.errors import EmbinitError
from embinit.models.stacked import IGNORE
from embinit.train import graphed, loop
from embinit.train.callbacks import TrainContext
from embinit.train.decoding import BOS_ID, EOS_ID, PAD_ID
from embinit.train.graphed import GraphedStep, bucket_length, bucket_shape, graphed_loss, pad_batch
from embinit.train.lifecycle import make_optimizer, make_task
from embinit.train.prepare import check_config, prepare
from embinit.train.translation import TranslationTask


# buckets ------------------------------------------------------------------------------------------------
def test_every_length_maps_to_a_bucket_at_least_as_long():
    buckets = set()
    for n in range(1, 1100):
        b = bucket_length(n)
        assert b >= n and b % 8 == 0, n
        assert b - n < max(8, b // 4), n      # at most 7 positions, or under a quarter, of padding
        buckets.add(b)
    assert sorted(b for b in buckets if b <= 64) == [8, 16, 24, 32, 40, 48, 56, 64]
    assert sorted(b for b in buckets if 64 < b <= 256) == [80, 96, 112, 128, 160, 192, 224, 256]
    assert bucket_length(129) == 160 and bucket_length(257) == 320


def test_buckets_stop_at_the_models_positions_and_never_cut():
    assert bucket_length(50, limit=52) == 52 and bucket_length(45, limit=52) == 48
    assert bucket_length(52, limit=52) == 52
    assert bucket_length(60, limit=52) == 60     # longer than the model takes: left for it to refuse
    with pytest.raises(ValueError):
        bucket_length(0)


def _pairs(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(4, 40, (s,), generator=g).tolist(), torch.randint(4, 40, (t,), generator=g).tolist())
            for s, t in lengths]


def test_padded_batch_keeps_the_real_tokens_and_ignores_every_added_target():
    batch = TranslationTask._collate(_pairs([(5, 9), (11, 3), (2, 6)]))
    shape = bucket_shape(batch, rows=5)
    assert shape == (5, 16, 16)                 # source 12 (11 + <eos>), target 10 (9 + <bos>)
    host = pad_batch(batch, shape)
    src, tgt_in, targets = host["src"], host["tgt_in"], host["targets"].view(5, 16)
    assert src.shape == (5, 16) and tgt_in.shape == (5, 16) and host["targets"].shape == (80,)
    b, s0 = batch["src"].shape
    t0 = batch["tgt_in"].shape[1]
    assert torch.equal(src[:b, :s0], batch["src"]) and (src[:b, s0:] == PAD_ID).all()
    assert torch.equal(tgt_in[:b, :t0], batch["tgt_in"]) and (tgt_in[:b, t0:] == PAD_ID).all()
    # pad rows: one real token a side (no all-masked attention row), every target ignored
    assert (src[b:, 0] == EOS_ID).all() and (src[b:, 1:] == PAD_ID).all()
    assert (tgt_in[b:, 0] == BOS_ID).all() and (tgt_in[b:, 1:] == PAD_ID).all()
    assert (targets[b:] == IGNORE).all() and (targets[:b, t0:] == IGNORE).all()
    real = targets != IGNORE
    assert int(real.sum()) == batch["n_targets"]
    assert torch.equal(targets[real], batch["targets"])     # the same ids, in the same order as `keep`


def test_a_batch_with_more_rows_than_the_step_is_refused():
    batch = TranslationTask._collate(_pairs([(3, 3)] * 4))
    with pytest.raises(EmbinitError, match="4 rows does not fit the graphed step's 3 rows"):
        bucket_shape(batch, rows=3)


# the loss -----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def no_dropout(tmp_path_factory):
    s = prepare(TrialConfig(task="synthetic_translation", threads=1, epochs=1, max_train_examples=200,
                            batch_size=16, dropout=0.0, seed=2), cache_dir=tmp_path_factory.mktemp("cache"))
    return s, make_task(s)


def _graphed_loss_of(s, batch, rows):
    host = pad_batch(batch, bucket_shape(batch, rows, s.model.cfg.max_positions))
    return graphed_loss(s.model, host["src"], host["tgt_in"], host["targets"],
                        torch.tensor(float(batch["n_targets"])))


def _grads(model, loss):
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("short", [False, True])
def test_the_graphed_loss_is_batch_loss_with_its_gradients(no_dropout, short):
    """All positions + ignore_index + the real count, on a batch padded to its bucket (and a short last
    batch padded in rows): `batch_loss`'s value and gradients, to float order."""
    s, task = no_dropout
    s.model.train()                                  # dropout 0: train mode draws nothing
    batches = task.train_batches(torch.Generator().manual_seed(0))
    batch = next(b for b in batches if b["src"].shape[0] == 16 and b["src"].shape[1] % 8 and b["tgt_in"].shape[1] % 8)
    if short:
        batch = TranslationTask._collate(s.data.splits["train"][:5])
        assert batch["src"].shape[0] == 5
    eager, n_targets, _ = task.batch_loss(s.model, batch)
    graphed = _graphed_loss_of(s, batch, rows=16)
    assert graphed.item() == pytest.approx(eager.item(), rel=1e-6, abs=1e-6)
    want, got = _grads(s.model, eager), _grads(s.model, _graphed_loss_of(s, batch, rows=16))
    assert want.keys() == got.keys() and len(want) > 10
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6, msg=name)


def test_the_graphed_loss_ignores_whatever_the_padding_holds(no_dropout):
    """The loss reads only the real targets: another pad row's content changes nothing."""
    s, task = no_dropout
    batch = TranslationTask._collate(s.data.splits["train"][:3])
    host = pad_batch(batch, bucket_shape(batch, 8, s.model.cfg.max_positions))
    n = torch.tensor(float(batch["n_targets"]))
    first = graphed_loss(s.model, host["src"], host["tgt_in"], host["targets"], n)
    host["src"][5, :3] = torch.tensor([7, 8, EOS_ID])
    host["tgt_in"][5, :3] = torch.tensor([BOS_ID, 9, 10])
    again = graphed_loss(s.model, host["src"], host["tgt_in"], host["targets"], n)
    assert again.item() == pytest.approx(first.item(), rel=1e-6)


# the step hook of train_epoch ---------------------------------------------------------------------------
def test_train_epoch_with_a_step_object_is_the_eager_epoch(tmp_path):
    """`train_epoch(step=...)` leaves the update to the step: here an eager step doing what the loop does,
    so the epoch, the step count, the callbacks and the weights are the eager epoch's."""
    runs = []
    for with_step in (False, True):
        s = prepare(TrialConfig(task="synthetic_translation", threads=1, epochs=1, max_train_examples=96,
                                batch_size=8, seed=4), cache_dir=tmp_path)
        task = make_task(s)
        opt = make_optimizer(list(s.model.parameters()), 1e-3)
        ctx = TrainContext(cfg=s.cfg, model=s.model, data=s.data, out_dir=None)
        calls = []

        def step(batch, s=s, task=task, opt=opt, calls=calls):
            calls.append(batch["n_targets"])
            loss, n_targets, n_tokens = task.batch_loss(s.model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss.detach(), n_targets, n_tokens

        seen = []
        cb = SimpleNamespace(on_step_end=lambda ctx, st, loss, seen=seen: seen.append((st, loss)))
        batches = task.train_batches(torch.Generator().manual_seed(0))[:7]
        stats = loop.train_epoch(s.model, batches, task, opt, ctx, [cb], task.autocast,
                                 step=step if with_step else None)
        runs.append((stats, ctx.step, seen, [p.detach().clone() for p in s.model.parameters()], calls))
    (eager, n0, seen0, w0, _), (stepped, n1, seen1, w1, calls) = runs
    assert len(calls) == 7 and n0 == n1 == 7
    assert stepped.loss == pytest.approx(eager.loss, rel=1e-6) and stepped.tokens == eager.tokens
    assert [st for st, _ in seen1] == [st for st, _ in seen0] == list(range(1, 8))
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(w0, w1))


def test_a_graphed_step_refuses_a_cpu_model_and_an_uncapturable_adam(no_dropout):
    s, _ = no_dropout
    opt = make_optimizer(list(s.model.parameters()), 1e-3)
    with pytest.raises(EmbinitError) as e:
        GraphedStep(s.model, opt, s.dropout_generator, 16)
    assert "CUDA graphs need a CUDA device; the model is on cpu" in str(e.value)
    assert "capturable=True" in str(e.value)          # every problem, in one message


class FakeCuda:
    """torch.cuda's stream and graph calls as fakes that record what the step asks of them: a capture runs
    its body eagerly (one more update, which this rehearsal does not mind), a replay does nothing."""

    def __init__(self, monkeypatch):
        self.events: list[tuple] = []
        fake = self

        class Graph:
            def register_generator_state(self, generator):
                fake.events.append(("register", generator))

            def replay(self):
                fake.events.append(("replay",))

        @contextlib.contextmanager
        def graph(cuda_graph, pool=None, stream=None):
            fake.events.append(("capture", pool, stream))
            yield

        class Stream:
            def __init__(self, device=None):
                pass

            def wait_stream(self, other):
                pass

        self.stream_type = Stream
        for name, value in {"CUDAGraph": Graph, "graph": graph, "Stream": Stream, "graph_pool_handle": lambda: "pool",
                            "current_stream": lambda device=None: Stream(),
                            "stream": lambda s: contextlib.nullcontext()}.items():
            monkeypatch.setattr(torch.cuda, name, value)
        monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, stream: None)
        monkeypatch.setattr(graphed, "step_problems", lambda *a: [])   # a CPU model, an uncapturable Adam


def test_the_step_captures_each_bucket_once_and_replays_it(tmp_path, monkeypatch):
    """GraphedStep's own flow, rehearsed on the CPU with torch.cuda faked (FakeCuda): a batch of a new
    bucket is an eager step, then one capture into the shared pool on the step's stream, with the dropout
    generator registered first; a batch of a known bucket is copied into that bucket's buffers and
    replayed, and the loss returned is a copy of the graph's output. The gradients stay the same tensors
    from step to step (zeroed and accumulated in place), as the graphs need."""
    cuda = FakeCuda(monkeypatch)
    s = prepare(TrialConfig(task="synthetic_translation", threads=1, epochs=1, max_train_examples=200,
                            batch_size=16, dropout=0.0, seed=5), cache_dir=tmp_path)
    task = make_task(s)
    opt = make_optimizer([p for p in s.model.parameters() if p.requires_grad], 1e-3)
    step = GraphedStep(s.model, opt, s.dropout_generator, 16)
    batches = task.train_batches(torch.Generator().manual_seed(0))
    shapes = [bucket_shape(b, 16, s.model.cfg.max_positions) for b in batches]
    assert 1 < len(set(shapes)) < len(batches)
    grads = None
    s.model.train()
    for batch, shape in zip(batches, shapes):
        known = shape in step.buckets
        before = len(cuda.events)
        loss, n_targets, n_tokens = step(batch)
        new = cuda.events[before:]
        if known:
            assert new == [("replay",)]
            bucket = step.buckets[shape]
            assert loss is not bucket.loss and torch.equal(loss, bucket.loss)
            host = pad_batch(batch, shape)
            assert all(torch.equal(bucket.inputs[k], host[k]) for k in host)
            assert bucket.n_targets.item() == batch["n_targets"]
        else:
            assert [e[0] for e in new] == ["register", "capture"] and new[0][1] is s.dropout_generator
            assert new[1][1] == "pool" and isinstance(new[1][2], cuda.stream_type)
            assert shape in step.buckets and shape in step.capture_seconds
        assert (n_targets, n_tokens) == (batch["n_targets"], batch["n_tokens"]) and torch.isfinite(loss)
        current = [p.grad for p in s.model.parameters() if p.requires_grad]
        assert grads is None or all(a is b for a, b in zip(grads, current))
        grads = current
    assert step.buckets.keys() == set(shapes) and {id(t) for t in grads} <= {id(t) for t in step.held}
    s.model.eval()
    with pytest.raises(EmbinitError, match="runs in train mode"):
        step(batches[0])


# the setting --------------------------------------------------------------------------------------------
def test_cuda_graphs_problems_name_the_field_and_the_fix():
    ok = TrialConfig(task="synthetic_translation", cuda_graphs=True, device="cuda")
    assert config_problems(ok) == []
    assert config_problems(dataclasses.replace(ok, device="cpu")) == [
        "cuda_graphs=True needs a CUDA device, but device is 'cpu': set device to cuda (or auto on a GPU "
        "machine), or cuda_graphs to false"]
    bad = TrialConfig(task="synthetic_classification", cuda_graphs=True, device="cpu", max_tokens=512)
    problems = config_problems(bad)
    assert len(problems) == 3 and all("cuda_graphs" in p for p in problems)
    assert "'synthetic_classification' is a classification task: set cuda_graphs to false" in problems[1]
    assert "max_tokens is set" in problems[2]
    assert config_problems(dataclasses.replace(ok, cuda_graphs="yes")) == [
        "cuda_graphs is a switch: true or false, got 'yes'"]
    with pytest.raises(EmbinitError, match="cuda_graphs=True needs a CUDA device"):
        check_config(dataclasses.replace(ok, device="cpu"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="device auto resolves to CUDA here")
def test_cuda_graphs_on_a_machine_without_cuda_fails_before_training(tmp_path):
    with pytest.raises(EmbinitError, match="cuda_graphs=True needs a CUDA device, but device 'auto' is cpu here"):
        prepare(TrialConfig(task="synthetic_translation", cuda_graphs=True, threads=1), cache_dir=tmp_path)


def test_the_spec_check_reports_cuda_graphs_on_cpu():
    from embinit.spec import SpecError, load_spec
    spec = {"name": "g", "tasks": ["synthetic_translation", "synthetic_lm"], "inits": ["xavier"],
            "defaults": {"cuda_graphs": True, "device": "cpu"}}
    with pytest.raises(SpecError) as e:
        load_spec(spec)
    text = "\n".join(f"{where}: {why}" for where, why in e.value.problems)
    assert ("trials synthetic_translation x Xavier, synthetic_lm x Xavier: cuda_graphs=True needs a CUDA device, "
            "but device is 'cpu'") in text
    assert "'synthetic_lm' is a lm task: set cuda_graphs to false" in text
    assert "resources.gpus: cuda_graphs: true needs a GPU for each trial (synthetic_translation, synthetic_lm)" in text
    on_gpu = {**spec, "defaults": {"cuda_graphs": True}, "tasks": ["synthetic_translation"],
              "resources": {"gpus": 0.25}}
    assert load_spec(on_gpu).expand()[0].cuda_graphs is True
    with pytest.raises(SpecError) as e:
        load_spec({**on_gpu, "resources": {"gpus": 0}})
    assert [where for where, _ in e.value.problems] == ["resources.gpus"]
    axis = {**on_gpu, "defaults": {}, "axes": {"cuda_graphs": [False, True]}, "resources": {"gpus": 0}}
    with pytest.raises(SpecError, match="cuda_graphs: true needs a GPU for each trial"):
        load_spec(axis)


# computed on the commit before `cuda_graphs` existed: its keys must still be reached
KEYS_BEFORE = {("multi30k", 1, None): "4c7359a9af18f441", ("sst2", 0, None): "1b37c5fb73a4b759",
               ("synthetic_translation", 3, 16): "71ac140fdfb90cfd"}


def test_trial_keys_without_cuda_graphs_are_unchanged_and_true_gets_its_own(version_of_the_pins):
    for (task, seed, batch), key in KEYS_BEFORE.items():
        cfg = TrialConfig(task=task, seed=seed, batch_size=batch,
                          device="cuda" if task == "synthetic_translation" else "auto")
        assert cfg.key() == key
        assert dataclasses.replace(cfg, cuda_graphs=False).key() == key
        d = cfg.to_dict()
        d.pop("cuda_graphs")                            # a config recorded before the field
        assert TrialConfig.from_dict(d).key() == key
    graphed = TrialConfig(task="multi30k", seed=1, cuda_graphs=True)
    assert graphed.key() != KEYS_BEFORE[("multi30k", 1, None)]
    assert graphed.key_fields()["cuda_graphs"] is True


def test_cuda_graphs_trials_do_not_fuse():
    from embinit.sweep.fused import fuse_key
    cfg = TrialConfig(task="synthetic_translation", device="cuda").to_dict()
    assert fuse_key(cfg) is not None
    assert fuse_key({**cfg, "cuda_graphs": True}) is None
