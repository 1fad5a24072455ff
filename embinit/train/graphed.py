"""The CUDA-graphed training step (`cuda_graphs: true`): forward, backward and Adam's update of one
translation batch captured once per shape bucket and replayed, so one step costs a few launches instead
of ~600 (on an H200 the eager step spent ~32 ms of host time for ~4 ms of GPU work).

    step = GraphedStep.for_member(m)          # after `lifecycle.start` (Adam is capturable there)
    stats = loop.train_epoch(..., step=step)  # each batch: copy into its bucket's buffers, replay

- Shape buckets (`bucket_length`): a batch's source and target lengths are padded up to the next
  multiple of 8 (16 past 64 positions, 32 past 128, ...: a quarter of the power of two below), never past
  the model's `max_positions`; its rows up to the trial's `batch_size` (the short last batch of a
  length pool gets pad rows: source `<eos>`, target input `<bos>`, every target ignored, so attention
  never sees an all-masked row and those rows' gradients are exactly zero). Multiples of 8 suit the
  fused attention kernels and tensor cores; the padding costs at most 7 positions a side (~25% on
  Multi30k's ~13-token sentences, FLOPs the GPU has idle time for), and the ladder keeps the buckets few
  (~4 per doubling of length). One graph per (rows, source, target) bucket, captured on its first batch.
- The graph boundary is the whole step (`_step`): `zero_grad` (in place: the gradients are allocated once
  and every graph accumulates into the same buffers), the loss, `backward`, `optimizer.step()`. The loss
  is computed on every position (`graphed_loss`): cross-entropy summed over the targets that are not
  IGNORE, divided by the real target count held in a device buffer, which is `batch_loss`'s mean up to
  float order, with no data-dependent size in the graph. On CUDA `padding_mask` never reads the device;
  the batch is padded, and its counts come from the host, before the graph.
- Capture, as in PyTorch's whole-network recipe: the first batch of a bucket is an ordinary eager step on
  a side stream (it is that batch's real training step: it warms up cuBLAS, autograd and Adam's state,
  and nothing is replayed for it), then the step is captured on the same stream into one memory pool
  shared by every bucket (`graph_pool_handle`; graphs replay one at a time on one stream).
- Dropout: the model's masks come from its own seeded CUDA generator (`set_dropout_generator`), which
  each graph registers (`register_generator_state`): every replay draws fresh masks from that generator
  and advances it, so a trial is deterministic for its seed and `last.pt` keeps the generator's state.
  Padding to buckets changes how many draws each dropout layer takes and which draw each token gets, so
  a graphed trial is a different (equally valid, deterministic) sample of the same trial than an eager
  one: `cuda_graphs` is part of the trial key when true (`TrialConfig.KEY_IF_SET`).
- Adam is `capturable=True` (with `fused=True`, `lifecycle.make_optimizer`): its step counts live on the
  device. The learning rate is constant (the trainer has no schedule and no gradient clipping), so the
  float baked into the graph stays right.
- The loss of each step is cloned out of the graph's output before the next replay, so `LossMeter`
  (reads every 25 steps, the exact step of a NaN/inf) works unchanged; a bad step has already updated
  the weights, as every step in a read window does, which a diverged trial never uses.
- Graphs are captured and replayed in train mode only (dropout on, as captured); evaluation (validation
  loss, BLEU) stays eager and reads the same parameters, which replays update in place.
"""

from __future__ import annotations

import time
import warnings

import torch
import torch.nn.functional as F

from embinit.errors import EmbinitError
from embinit.models.stacked import IGNORE
from embinit.train.decoding import BOS_ID, EOS_ID, PAD_ID
from embinit.train.loop import autocast_for

LENGTH_STEP = 8   # the finest bucket step (positions)


def bucket_length(n: int, limit: int | None = None) -> int:
    """The bucket of a sequence of `n` positions: `n` rounded up to a multiple of max(8, a quarter of the
    power of two below it), at most `limit` (the model's max_positions), never below `n`."""
    if n < 1:
        raise ValueError(f"a sequence has at least one position, got {n}")
    step = max(LENGTH_STEP, 1 << max((n - 1).bit_length() - 3, 0))
    padded = -(-n // step) * step
    return max(n, min(padded, limit)) if limit else padded


def bucket_shape(batch: dict, rows: int, limit: int | None = None) -> tuple[int, int, int]:
    """(rows, source length, target length) of `batch`'s bucket."""
    real = batch["src"].shape[0]
    if real > rows:
        raise EmbinitError(f"a batch of {real} rows does not fit the graphed step's {rows} rows")
    return rows, bucket_length(batch["src"].shape[1], limit), bucket_length(batch["tgt_in"].shape[1], limit)


def pad_batch(batch: dict, shape: tuple[int, int, int]) -> dict[str, torch.Tensor]:
    """A translation batch (`TranslationTask._collate`) padded on the host to `shape`: `src` [R, S],
    `tgt_in` [R, T], `targets` [R * T] (the real target ids, IGNORE elsewhere). Pad rows hold one real
    token a side (`<eos>`, `<bos>`) so no attention row is all masked; their targets are all IGNORE."""
    rows, s, t = shape
    b, s0 = batch["src"].shape
    t0 = batch["tgt_in"].shape[1]
    src = torch.full((rows, s), PAD_ID, dtype=torch.long)
    src[:b, :s0] = batch["src"]
    src[b:, 0] = EOS_ID
    tgt_in = torch.full((rows, t), PAD_ID, dtype=torch.long)
    tgt_in[:b, :t0] = batch["tgt_in"]
    tgt_in[b:, 0] = BOS_ID
    targets = torch.full((rows, t), IGNORE, dtype=torch.long)
    out = batch["tgt_out"]
    targets[:b, :t0] = out.masked_fill(out == PAD_ID, IGNORE)
    return {"src": src, "tgt_in": tgt_in, "targets": targets.flatten()}


def graphed_loss(model, src: torch.Tensor, tgt_in: torch.Tensor, targets: torch.Tensor,
                 n_targets: torch.Tensor) -> torch.Tensor:
    """`TranslationTask.batch_loss`'s mean target loss without a data-dependent size: logits on every
    position, the IGNORE targets left out of the sum, divided by the real count (a device tensor)."""
    memory, mask = model.encode(src)
    hidden = model.decode(tgt_in, memory, mask)
    logits = model.output(hidden.flatten(0, 1))
    return F.cross_entropy(logits.float(), targets, ignore_index=IGNORE, reduction="sum") / n_targets


class _Bucket:
    """One bucket's static input buffers, its graph and the graph's loss output."""

    def __init__(self, host: dict[str, torch.Tensor], device: torch.device):
        self.inputs = {k: torch.empty_like(v, device=device) for k, v in host.items()}
        self.n_targets = torch.empty((), dtype=torch.float32, device=device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.loss: torch.Tensor | None = None

    def load(self, host: dict[str, torch.Tensor], n_targets: int) -> None:
        for k, v in host.items():
            self.inputs[k].copy_(v, non_blocking=True)
        self.n_targets.fill_(n_targets)


def step_problems(device: torch.device, optimizer, generator: torch.Generator | None) -> list[str]:
    """Why a model on `device` with this Adam and dropout generator cannot have its step graphed."""
    problems = []
    if device.type != "cuda":
        problems.append(f"CUDA graphs need a CUDA device; the model is on {device}")
    if not all(g.get("capturable") for g in optimizer.param_groups):
        problems.append("the optimizer must be built with capturable=True (lifecycle.make_optimizer)")
    if generator is None or generator.device.type != device.type:
        problems.append(f"the dropout generator must be a {device} generator, got "
                        f"{None if generator is None else generator.device}")
    return problems


class GraphedStep:
    """`loop.train_epoch`'s `step`: one translation batch -> (loss, n_targets, n_tokens), the update
    applied. `capture_seconds[bucket]` is the one-off cost of each bucket (warm-up step and capture)."""

    def __init__(self, model, optimizer, generator: torch.Generator, rows: int, precision: str = "fp32"):
        device = next(model.parameters()).device
        problems = step_problems(device, optimizer, generator)
        if problems:
            raise EmbinitError("; ".join(problems))
        self.model, self.optimizer, self.generator, self.rows, self.device = model, optimizer, generator, rows, device
        self.limit = model.cfg.max_positions
        # autocast's weight-cast cache must be off inside a captured region (PyTorch's CUDA graph notes)
        self.autocast = autocast_for(precision, device, cache=False)
        self.stream = torch.cuda.Stream(device)
        self.pool = torch.cuda.graph_pool_handle()
        self.buckets: dict[tuple[int, int, int], _Bucket] = {}
        self.capture_seconds: dict[tuple[int, int, int], float] = {}
        self.held: list[torch.Tensor] = []

    @classmethod
    def for_member(cls, m) -> "GraphedStep":
        """The step of a trial started by `lifecycle.start` (`m.s` its Setup)."""
        return cls(m.model, m.optimizer, m.generator, m.s.cfg.batch_size, m.s.cfg.precision)

    def __call__(self, batch: dict):
        if not self.model.training:
            raise EmbinitError("a graphed step runs in train mode (its dropout is captured on)")
        shape = bucket_shape(batch, self.rows, self.limit)
        host = pad_batch(batch, shape)
        bucket = self.buckets.get(shape)
        if bucket is None:
            loss = self._first(shape, host, batch["n_targets"])
        else:
            bucket.load(host, batch["n_targets"])
            bucket.graph.replay()
            loss = bucket.loss.clone()   # the next replay overwrites the graph's output
        return loss, batch["n_targets"], batch["n_tokens"]

    def _step(self, bucket: _Bucket) -> torch.Tensor:
        self.optimizer.zero_grad(set_to_none=False)   # in place: one set of gradient buffers for all graphs
        with self.autocast():
            loss = graphed_loss(self.model, bucket.inputs["src"], bucket.inputs["tgt_in"],
                                bucket.inputs["targets"], bucket.n_targets)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def _first(self, shape, host, n_targets: int) -> torch.Tensor:
        """A new bucket: its batch's real step, eager on the side stream (the warm-up), then the capture."""
        began = time.perf_counter()
        bucket = _Bucket(host, self.device)
        bucket.load(host, n_targets)
        current = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="This instance was constructed with capturable=True")
            loss = self._step(bucket).clone()
        current.wait_stream(self.stream)
        loss.record_stream(current)
        # the graphs write these tensors in place: held here, so that their memory outlives anything that
        # drops them from the model or Adam (which nothing in training does; a graph never sees new ones)
        self.held = [t for g in self.optimizer.param_groups for p in g["params"]
                     for t in (p.grad, *self.optimizer.state[p].values()) if isinstance(t, torch.Tensor)]
        graph = torch.cuda.CUDAGraph()
        graph.register_generator_state(self.generator)   # before capture: replays draw from it
        try:
            with torch.cuda.graph(graph, pool=self.pool, stream=self.stream):
                bucket.loss = self._step(bucket)
        except RuntimeError as e:
            raise EmbinitError(f"capturing the training step of bucket (rows, source, target) {shape} in a "
                               f"CUDA graph failed: {e}; train this trial with cuda_graphs: false") from e
        bucket.graph = graph
        self.buckets[shape] = bucket
        self.capture_seconds[shape] = time.perf_counter() - began
        return loss
