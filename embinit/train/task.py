"""The `Task` protocol: what `run_trial` (and the fused trainer) need from a task kind's trainer.

Each kind in the task registry (embinit.task_registry) names its Task class; `make_task` builds one
with `from_setup`. The contract, written once and tested for every registered kind by
tests/test_task_contract.py:

- `from_setup(setup, autocast)`: a task for a prepared trial (`embinit.train.prepare.Setup`: its
  resolved config, TaskData, tables, device); `autocast()` returns the context each forward runs in.
- `tracked`: [(validation metric, "min" | "max"), ...]; the first is the criterion the best checkpoint
  is kept by; every name is a key `validate` returns.
- `train_batches(generator)`: one epoch's batches in an order drawn from `generator` only (the same
  seed gives the same batches); each batch is a dict of host tensors and ints, with `n_targets` (the
  targets its loss averages) and `n_tokens` (the tokens it feeds).
- `batch_loss(model, batch)`: (mean loss tensor, `n_targets`, `n_tokens`); the loss falls as the model
  trains.
- A kind that fuses (its registry entry names a `fused` model) also has `fused_loss(fused, batches)`:
  one step of a fused group, the members' batches stacked and padded -> ([G] mean losses, (token
  slots of the separate batches, of the stacked batch)); for a group of one it is `batch_loss`.
- `validate(model)`: {"val/...": float} of the validation split; `test(model)`: {"test/...": ...} of
  the test split, {} without one. Both deterministic for a given model (no dropout: eval mode).
- A kind with per-example outputs also has `test_outputs()`: {file name (`checkpoint_files.output_file`):
  text} of the last `test` call (translation: the test hypotheses and references `test/bleu` scored;
  classification: each dev split's predicted and true labels); the trial writes them into its folder
  and the sweep logs them. A kind without any omits it.
- `device`, `autocast`, `data`, `cfg` attributes; `kind` names the registry kind.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol


class Task(Protocol):
    kind: str
    tracked: list[tuple[str, str]]
    autocast: Callable[[], Any]

    @classmethod
    def from_setup(cls, setup: Any, autocast: Callable[[], Any]) -> "Task": ...

    def train_batches(self, generator: Any) -> list[dict]: ...

    def batch_loss(self, model: Any, batch: dict) -> tuple[Any, int, int]: ...

    def validate(self, model: Any) -> dict[str, float]: ...

    def test(self, model: Any) -> dict[str, Any]: ...
