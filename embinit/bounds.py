"""The bounds on the numbers a spec sets, declared once: the spec, the trainer and the service check them.

Each `Bound` holds the values embinit accepts anywhere (`low`..`high`, inclusive unless `open` says
otherwise: the spec model refuses anything outside, so do the trainer's `check_config` and, for the
data's own knobs, `load_task`) and, where a deployment should size it, the service
setting that caps it further (`Settings.<setting>`, default `default`, env `EMBINIT_<SETTING>`). A value
beyond the setting is a 422 from the service; the CLI, on the user's own machine, only applies `high`.

Why these numbers: seeds are 32-bit (numpy); the position table and the activations grow with `max_len`
(about 1 GB per 10^6 positions), `retries` reruns a failing trial that often on the cluster, and an lr
outside 1e-8..10 only diverges or never moves.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

SEED_MAX = 2**32 - 1


@dataclass(frozen=True)
class Bound:
    low: float | None          # smallest valid value (inclusive)
    high: float | None         # largest value embinit accepts anywhere (inclusive); None: no hard limit
    setting: str | None = None  # the service setting that caps it further
    default: float | None = None  # that setting's default
    why: str = ""
    open: str = ""             # "low" / "high" / "both": that end is excluded (dropout < 1, pe_base > 0)


# Keys are TrialConfig / spec field names: every numeric hyperparameter has one (tests/test_bounds.py).
# Each number is declared here and nowhere else.
BOUNDS: dict[str, Bound] = {
    "seed": Bound(0, SEED_MAX, why="seeds are 32-bit"),
    "data_seed": Bound(0, SEED_MAX, why="seeds are 32-bit"),
    "emb_seed": Bound(0, SEED_MAX, why="seeds are 32-bit"),
    "seed_count": Bound(1, 100_000, why="`seeds: N` builds a list of N seeds"),
    "retries": Bound(0, 1000, "max_retries", 10, why="Tune reruns a failing trial this often"),
    "pe_positions": Bound(1, 1_000_000, why="the position table holds pe_positions x d_model floats"),
    "max_len": Bound(2, 1_000_000, "max_len", 8192, why="about 1 GB of memory per 10^6 positions"),
    "lr": Bound(1e-8, 10.0, "max_lr", 1.0, why="beyond it training diverges at once"),
    "epochs": Bound(1, None, "max_epochs", 1000, why="a trial would hold its slot for days"),
    "d_model": Bound(1, None, "max_d_model", 4096, why="memory per trial"),
    "layers": Bound(1, None, "max_layers", 64, why="memory per trial"),
    "ff_dim": Bound(1, None, "max_ff_dim", 16384, why="memory per trial"),
    "batch_size": Bound(1, None, "max_batch_size", 65536, why="memory per trial"),
    "max_tokens": Bound(1, None, "max_batch_tokens", 10_000_000, why="memory per trial"),
    "beam_size": Bound(1, None, "max_beam_size", 64, why="decoding memory grows with the beam"),
    "length_penalty": Bound(0, 10, why="GNMT's alpha (0: log-probability alone, 0.6 to 1 in use); beyond, the "
                            "longest hypothesis wins whatever its probability"),
    "heads": Bound(1, None, why="attention heads split d_model"),
    "dropout": Bound(0, 1, why="a probability; 1 would drop everything", open="high"),
    "attention_dropout": Bound(0, 1, why="a probability; 1 would drop every attention weight", open="high"),
    "activation_dropout": Bound(0, 1, why="a probability; 1 would drop every feed-forward activation", open="high"),
    "min_freq": Bound(1, None, why="a count of occurrences in the training data"),
    "pe_base": Bound(0, None, why="the base of the encodings' wavelengths", open="low"),
    "early_stopping_patience": Bound(1, None, why="epochs without improvement"),
    "max_train_examples": Bound(1, None, why="a count of examples"),
    "threads": Bound(1, None, why="torch intra-op threads"),
}


_CHECKS = {"ge": (">=", operator.ge), "gt": (">", operator.gt), "le": ("<=", operator.le), "lt": ("<", operator.lt)}


def field_limits(name: str) -> dict[str, Any]:
    """pydantic `Field` keywords (ge or gt, le or lt) for the bound `name`: the spec model's view."""
    b = BOUNDS[name]
    low = "gt" if b.open in ("low", "both") else "ge"
    high = "lt" if b.open in ("high", "both") else "le"
    return {k: v for k, v in ((low, b.low), (high, b.high)) if v is not None}


def setting_default(setting: str) -> Any:
    """The default of a service setting declared here (`Settings.max_len = setting_default("max_len")`)."""
    for b in BOUNDS.values():
        if b.setting == setting:
            return b.default
    raise KeyError(f"no bound has the setting {setting!r}")


def problem(name: str, value: Any) -> str | None:
    """Why `value` is outside the bound `name` (None when inside, or when `name` has no bound)."""
    b = BOUNDS.get(name)
    if b is None or not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    for key, limit in field_limits(name).items():   # the low end first
        op, holds = _CHECKS[key]
        if not holds(value, limit):
            why = f" ({b.why})" if key in ("le", "lt") else ""
            return f"{name} must be {op} {_num(limit)}{why}, got {_num(value)}"
    return None


def over_setting(name: str, value: Any, limit: float) -> str | None:
    """Why `value` exceeds the service's setting for `name` (None when within it)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= limit:
        return None
    return f"{_num(value)} exceeds this service's limit of {_num(limit)} (setting {BOUNDS[name].setting})"


def _num(value: float) -> int | float:
    return int(value) if float(value).is_integer() and abs(value) < 1e18 else value
