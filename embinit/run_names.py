"""What MLflow's run table shows of a trial: its run name and its `init` params (issue 22: readable names
without clutter). Plain functions of a label, a seed and params; `embinit.trial_run` writes them."""

from __future__ import annotations

from typing import Any

NOTE_TAG = "mlflow.note.content"  # MLflow's UI shows an experiment's (or run's) description from this tag


def trial_run_name(label: str, seed: Any) -> str:
    """A trial run's name: its label (the report's) and seed, e.g. `GloVe_Xavier-s0`; the label comes
    first, so a narrow or grouped name column still shows it."""
    return f"{label}-s{seed}"


def trial_params(params: dict[str, str], label: str) -> dict[str, str]:
    """A trial run's params from its resolved config params: `init` is the label the report uses
    (`GloVe_Xavier`), `init_spec` the init as the spec wrote it (`glove+standardize`)."""
    out = dict(params)
    if "init" in out:
        out["init_spec"] = out.pop("init")
    return {**out, "init": label}
