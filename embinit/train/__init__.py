"""Training: batching, the three task trainers, decoding and BLEU, checkpoints, `run_trial`.

    from embinit.config import TrialConfig
    from embinit.train import run_trial
    result = run_trial(TrialConfig(task="multi30k", init="glove+standardize", pretrained=PATH, seed=1),
                       out_dir="runs/t1")
    result.test["test/bleu"], result.best_epoch, result.to_dict()

The trainers know nothing of Ray or MLflow: they return a `TrialResult` and call callbacks
(`embinit.train.callbacks`).
"""

from embinit.train.callbacks import TrainContext
from embinit.train.result import TrialResult
from embinit.train.trial import run_trial

__all__ = ["run_trial", "TrialResult", "TrainContext"]
