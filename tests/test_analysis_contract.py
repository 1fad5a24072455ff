"""The contract of every analysis in the registry (embinit.analysis.callbacks.ANALYSES), tested once for
all: made from its own validated spec settings, on a tiny real trial, its callback runs and logs only
metrics under its own prefix (`<prefix>/...`, and the `init/` and `best/` summaries), at the trial's
optimizer steps; an unknown name fails with the registered ones. A new analysis adds a field to the
spec's `Analyses`, its entry in `ANALYSES` and an example below."""

from __future__ import annotations

import math
import re

import pytest
import torch

from embinit.analysis.callbacks import ANALYSES, make_callbacks
from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.spec.models import Analyses

torch.set_num_threads(1)
TINY = TrialConfig(task="synthetic_lm", epochs=2, max_train_examples=64, d_model=16, layers=1, ff_dim=16,
                   heads=2, threads=1)


def reference_file(tmp_path):
    """A small GloVe-style text file over the synthetic task's words: the trial aligns with it."""
    from embinit.tasks.synthetic import LEXICON
    words = sorted(set(LEXICON.values()))
    vecs = torch.randn(len(words), 8, generator=torch.Generator().manual_seed(1))
    path = tmp_path / "ref.txt"
    path.write_text("".join(w + " " + " ".join(f"{x:.6f}" for x in v.tolist()) + "\n" for w, v in zip(words, vecs)))
    return str(path)


# One example of each analysis's spec settings (what a spec's `analyses.<name>` holds).
EXAMPLES = {
    "similarity": lambda tmp: {"reference": reference_file(tmp), "snapshot_dir": str(tmp / "snaps"),
                               "every_n_steps": 2, "k": 3, "metric": ["overlap", "jaccard"]},
    "probe": lambda tmp: {"every_n_epochs": 1, "max_len": 8, "n_samples": 200},
}


class OptimizerSteps:
    """The trial's optimizer steps: 0 (before any update) and each step's end."""

    def __init__(self):
        self.steps = {0}

    def on_step_end(self, ctx, step: int, loss: float) -> None:
        self.steps.add(step)


def test_every_analysis_of_the_spec_is_registered_and_has_an_example():
    assert set(ANALYSES) == set(Analyses.model_fields) == set(EXAMPLES)
    assert all(re.fullmatch(r"[a-z][a-z0-9_]*", name) for name in ANALYSES)


@pytest.mark.parametrize("name", sorted(ANALYSES))
def test_an_analysis_logs_under_its_own_prefix_at_optimizer_steps(name, tmp_path):
    from embinit.train import run_trial
    analyses = Analyses.model_validate({name: EXAMPLES[name](tmp_path)})
    logged: list[tuple[int, dict]] = []
    callbacks = make_callbacks(analyses, log_fn=lambda metrics, step: logged.append((step, dict(metrics))),
                               out_dir=tmp_path / "run", cfg=TINY)
    assert len(callbacks) == 1, callbacks
    prefix = callbacks[0].prefix
    steps = OptimizerSteps()
    result = run_trial(TINY, out_dir=tmp_path / "run", callbacks=[*callbacks, steps], resume=False, cache_dir=False)
    assert result.status == "finished"
    assert logged, f"{name} logged nothing"
    names = {key for _, metrics in logged for key in metrics}
    own = re.compile(rf"(?:(?:init|best)/)?{re.escape(prefix)}/\S+")
    assert all(own.fullmatch(key) for key in names), sorted(names)
    assert any(key.startswith(f"{prefix}/") for key in names)
    assert all(isinstance(v, float) and math.isfinite(v) for _, metrics in logged for v in metrics.values())
    logged_steps = [step for step, _ in logged]
    assert set(logged_steps) <= steps.steps and logged_steps == sorted(logged_steps), (logged_steps, steps.steps)
    assert logged_steps[0] == 0 and logged_steps[-1] == max(steps.steps)   # from the init to the end


def test_an_unknown_analysis_names_the_registered_ones():
    with pytest.raises(EmbinitError) as err:
        make_callbacks({"knn": {}, "probe": {}})
    assert "['knn']" in str(err.value) and str(sorted(ANALYSES)) in str(err.value)
