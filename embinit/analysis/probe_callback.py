"""`ProbeCallback`: the position-absorption probe (embinit.analysis.probe) at train start, every N epochs
and at the end, and `make_probe`, its entry in the analysis registry (`embinit.analysis.callbacks.ANALYSES`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from embinit.analysis.trial_context import AnalysisTrial, LogFn, model_table

if TYPE_CHECKING:
    from embinit.spec.models import ProbeAnalysis


class ProbeCallback:
    """`probe/*` metrics (embinit.analysis.probe) at step 0, every N epochs, and after training.

    With `summary=True` (the sweep's setting) the step-0 values are also logged as `init/probe/*`, and
    after a finished trial -- when the trainer has loaded the best epoch's weights -- the probe runs on
    them and logs `best/probe/*`, even if the last epoch was already measured (its weights may differ)."""

    def __init__(self, every_n_epochs: int | None = None, log_fn: LogFn | None = None,
                 key: str | None = None, max_len: int | None = None, summary: bool = False, **probe_kw):
        self.every, self.log_fn, self.key = every_n_epochs, log_fn, key
        self.max_len, self.kw, self.summary = max_len, probe_kw, summary
        self.prefix = probe_kw.get("prefix", "probe")   # probe_table's namespace for its metrics
        self.history: list[dict] = []
        self._last_step = None

    def probe(self, ctx) -> dict:
        from embinit.analysis.probe import DEFAULT_MAX_LEN, probe_table
        _, table = model_table(ctx.model, self.key)
        cfg = getattr(ctx, "cfg", None)
        kw = {"pe_base": float(getattr(cfg, "pe_base", None) or 10000.0), **self.kw}
        return probe_table(table, max_len=self.max_len or DEFAULT_MAX_LEN, **kw)

    def measure(self, ctx, step: int, phase: str | None = None) -> dict:
        """Probe now, log `probe/*` at `step` (and `<phase>/probe/*` when a phase is given)."""
        self._last_step = step
        metrics = self.probe(ctx)
        self.history.append({"step": step, **metrics})
        self._log({**metrics, **({f"{phase}/{k}": v for k, v in metrics.items()} if phase else {})}, step)
        return metrics

    def _log(self, metrics: dict, step: int) -> None:
        if self.log_fn is not None:
            self.log_fn(metrics, step)

    def on_train_start(self, ctx) -> None:
        self.measure(ctx, ctx.step, "init" if self.summary and ctx.step == 0 else None)

    def on_epoch_end(self, ctx, epoch: int, metrics: dict) -> None:
        if self.every and epoch % self.every == 0:
            self.measure(ctx, ctx.step)

    def on_train_end(self, ctx, result) -> None:
        best = self.summary and getattr(result, "status", None) == "finished"
        if self._last_step != ctx.step:
            self.measure(ctx, ctx.step, "best" if best else None)
        elif best:   # the series has this step (last epoch's weights); the best weights are logged beside
            self._log({f"best/{k}": v for k, v in self.probe(ctx).items()}, ctx.step)


def make_probe(settings: ProbeAnalysis | Mapping[str, Any], trial: AnalysisTrial) -> ProbeCallback:
    """The spec's `analyses.probe` (a validated ProbeAnalysis: each field is a ProbeCallback argument of
    the same name) for one trial, with the `init/` and `best/` summaries. A Mapping instead holds
    ProbeCallback's own arguments (scripts without a spec)."""
    if isinstance(settings, Mapping):
        return ProbeCallback(log_fn=trial.log_fn, **settings)
    return ProbeCallback(log_fn=trial.log_fn, summary=True, **settings.model_dump())
