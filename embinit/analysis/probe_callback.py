"""`ProbeCallback`: the position-absorption probe (embinit.analysis.probe) at train start, every N epochs
and at the end, and `make_probe`, its entry in the analysis registry (`embinit.analysis.callbacks.ANALYSES`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from embinit.analysis.trial_context import AnalysisTrial, LogFn, finite, model_table

if TYPE_CHECKING:
    from embinit.spec.models import ProbeAnalysis


class ProbeCallback:
    """`probe/*` metrics (embinit.analysis.probe) at step 0, every N epochs, and after training.

    With `summary=True` (the sweep's setting) the step-0 values are also logged as `init/probe/*`, and
    after a finished trial -- when the trainer has loaded the best epoch's weights -- the probe runs on
    them and logs `best/probe/*`, even if the last epoch was already measured (its weights may differ).
    The series' point at the last step is the last epoch's table (kept at its end), never the best one.
    A table holding NaN/inf (a diverging trial's, `trial_context.finite`) is not probed: its step goes to
    `skipped_steps` and nothing is logged for it; the trainer records the trial as diverged."""

    def __init__(self, every_n_epochs: int | None = None, log_fn: LogFn | None = None,
                 key: str | None = None, max_len: int | None = None, summary: bool = False, **probe_kw):
        self.every, self.log_fn, self.key = every_n_epochs, log_fn, key
        self.max_len, self.kw, self.summary = max_len, probe_kw, summary
        self.prefix = probe_kw.get("prefix", "probe")   # probe_table's namespace for its metrics
        self.history: list[dict] = []
        self.skipped_steps: list[int] = []   # steps whose table held NaN/inf (a diverging trial)
        self._last_step = None
        self._ended = None   # (step, table) at the latest epoch end not measured

    def probe(self, ctx, table=None) -> dict:
        """The probe of the model's table (or of `table`, a `model_table` taken earlier)."""
        from embinit.analysis.probe import DEFAULT_MAX_LEN, probe_table
        if table is None:
            _, table = model_table(ctx.model, self.key)
        cfg = getattr(ctx, "cfg", None)
        kw = {"pe_base": float(getattr(cfg, "pe_base", None) or 10000.0), **self.kw}
        return probe_table(table, max_len=self.max_len or DEFAULT_MAX_LEN, **kw)

    def measure(self, ctx, step: int, phase: str | None = None, table=None) -> dict | None:
        """Probe now (or `table`), log `probe/*` at `step` (and `<phase>/probe/*` when a phase is given);
        None, logging nothing, for a table that holds NaN/inf."""
        self._last_step = step
        if table is None:
            _, table = model_table(ctx.model, self.key)
        if not finite(table):   # nothing to probe; the trainer records the divergence
            self.skipped_steps.append(step)
            return None
        metrics = self.probe(ctx, table)
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
        else:   # this may be the last step: keep its table for on_train_end
            self._ended = (ctx.step, model_table(ctx.model, self.key)[1])

    def on_train_end(self, ctx, result) -> None:
        best = self.summary and getattr(result, "status", None) == "finished"
        ended = self._ended[1] if self._ended is not None and self._ended[0] == ctx.step else None
        self._ended = None
        if self._last_step != ctx.step and (ended is not None or not best):
            self.measure(ctx, ctx.step, table=ended)   # the last epoch's table (a diverged trial's: as it is)
        elif self._last_step != ctx.step:   # no epoch ended here: the model's weights stand for it
            self.measure(ctx, ctx.step, "best")
            return
        if best:   # the series has this step (last epoch's weights); the best weights are logged beside
            self._log({f"best/{k}": v for k, v in self.probe(ctx).items()}, ctx.step)


def make_probe(settings: ProbeAnalysis | Mapping[str, Any], trial: AnalysisTrial) -> ProbeCallback:
    """The spec's `analyses.probe` (a validated ProbeAnalysis: each field is a ProbeCallback argument of
    the same name) for one trial, with the `init/` and `best/` summaries. A Mapping instead holds
    ProbeCallback's own arguments (scripts without a spec)."""
    if isinstance(settings, Mapping):
        return ProbeCallback(log_fn=trial.log_fn, **settings)
    return ProbeCallback(log_fn=trial.log_fn, summary=True, **settings.model_dump())
