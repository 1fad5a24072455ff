"""Sweeps: an `ExperimentSpec` -> Ray Tune (one Tune trial per embinit trial) -> MLflow -> report.

    from embinit.spec import load_spec
    from embinit.sweep import run_sweep
    result = run_sweep(load_spec("tune_configs/quickstart.yaml"))
    print(result.report.to_markdown())
"""

from embinit.sweep.run import SweepResult, run_sweep

__all__ = ["run_sweep", "SweepResult"]
