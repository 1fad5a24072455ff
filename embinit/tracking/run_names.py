"""What MLflow's run table shows of a trial: its run name and its params (issue 22: readable names
without clutter). Plain functions of a label, a seed and a config; `embinit.tracking.trial_run` writes them."""

from __future__ import annotations

from typing import Any

from embinit.errors import EmbinitError

NOTE_TAG = "mlflow.note.content"  # MLflow's UI shows an experiment's (or run's) description from this tag


def value_text(value: Any) -> str:
    """A setting's value (an axis's, a search point's) as run names, the report and its notes all write it:
    a float to 6 significant digits (an Optuna point's `lr` 0.000123456789 is 0.000123457; 0.0 is 0, 0.1
    is 0.1, 1e-05 is 1e-05), as run names always have, so that a new seed's `embinit.cell` tag pools with
    those of the runs already stored; anything else (an int, a bool, a string) as `str`."""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def trial_setting(axes: dict[str, Any] | None, point: dict[str, Any] | None) -> str:
    """What tells a trial from its siblings of one label and seed: its axes' values, then its search
    point's, as the `embinit.group` tag holds them, `name=value` joined by commas
    (`train_embeddings=False,pos_encoding=True`, `lr=0.001,dropout=0.1`); empty for a trial of neither.
    Values as `value_text` writes them, past 40 characters cut at the front."""
    values = {**(axes or {}), **(point or {})}
    return ",".join(f"{k}={short(value_text(v))}" for k, v in values.items())


def trial_run_name(label: str, seed: Any, axes: dict[str, Any] | None = None,
                   point: dict[str, Any] | None = None, task: str | None = None) -> str:
    """A trial run's name: its label (the report's) and seed, then what tells it from its siblings
    (`trial_setting`), then `task` where given (a spec of several tasks: `WorkItem.name_task`), e.g.
    `GloVe_Xavier-s0`, `Xavier-s0 lr=0.001`, `GloVe-s0 train_embeddings=False,pos_encoding=False`,
    `GloVe-s0 (mnli)`; the label comes first, so a narrow or grouped name column still shows it. Only
    the run's name: no key reads it, and runs named before the setting was added keep their names."""
    setting = trial_setting(axes, point)
    return f"{label}-s{seed}" + (f" {setting}" if setting else "") + (f" ({task})" if task else "")


def sweep_run_name(spec_name: str, number: int) -> str:
    """A sweep run's name: its spec's name and its number among its experiment's sweep runs, counted from
    1 (`sst2-grid #3`), so that one spec's sweeps (rerun, its grid extended) are told apart in MLflow's run
    table. Sweep runs named before the number was added keep the spec's name alone."""
    return f"{spec_name} #{number}"


def trial_cell(task: str, label: str, axes: dict[str, Any] | None = None,
               point: dict[str, Any] | None = None) -> str:
    """The `embinit.cell` tag: the run's name but its seed, and the task, e.g. `GloVe lr=0.001 (mnli)`.
    MLflow's "Group by" on it averages the seeds of each grid point and ablation cell, where
    `embinit.init` pools them all; the label comes first, as in the name (a group's header is narrow).
    Where a label's trials differ in a setting, the sweep adds it before the task, as the report's row
    says it (`Xavier {epochs=4} (mnli)`: embinit.report.point_tags.cell_tags)."""
    setting = trial_setting(axes, point)
    return label + (f" {setting}" if setting else "") + f" ({task})"


def short(value: Any, width: int = 40) -> str:
    """`value` as text, cut at the front past `width` characters (a path keeps its file name)."""
    text = str(value)
    return text if len(text) <= width else "…" + text[-(width - 1):]


def trial_params(params: dict[str, str], label: str) -> dict[str, str]:
    """A trial run's params from its resolved config params: `init` is the label the report uses
    (`GloVe_Xavier`), `init_spec` the init as the spec wrote it (`glove+standardize`)."""
    out = dict(params)
    if "init" in out:
        out["init_spec"] = out.pop("init")
    return {**out, "init": label}


# Fields the trainer resolves from what it loads: d_model and heads against a pretrained source's D,
# precision `auto` against the device. Only the config the model trained with knows them.
TRAINER_RESOLVED = ("d_model", "heads", "precision")


def flat_params(config: dict[str, Any]) -> dict[str, str]:
    out = {}
    for k, v in config.items():
        if isinstance(v, dict):
            out.update({f"{k}.{kk}": str(vv) for kk, vv in flat_params(v).items()})
        else:
            out[k] = str(v)
    return out


def resolved_params(config: dict[str, Any]) -> dict[str, str]:
    """The flat params of a trial config with the task defaults filled in, and unset options (None) and
    options that mean nothing for the trial (`idle_options`) left out, so the run table shows the values
    the trial trained with, not `None` or a classifier's `beam_size`. Display only: the config itself is
    the run's `embinit.config` tag, which `embinit train --from-run`, the report and the service read."""
    from embinit.config import TrialConfig
    try:
        config = TrialConfig.from_dict(config).resolved().to_dict()
    except EmbinitError:
        pass  # not a TrialConfig (an older run's fields): log it as given
    idle = idle_options(config)
    return {k: v for k, v in flat_params(config).items() if v != "None" and k not in idle}


# Options a trial reads only where its task's kind uses them (`task_types.KindEntry`): decoding (`decodes`)
# and tied tables (`stream`, a language model's; `config_problems` refuses them elsewhere).
DECODING = ("beam_size", "length_penalty")


def idle_options(config: dict[str, Any]) -> set[str]:
    """The options of a trial config that change nothing its trial computes, left out of its params: the
    decoding options of a task kind that does not decode (a classifier, a language model), `length_penalty`
    under greedy decoding (`beam_size` 1: it ranks beam hypotheses only, and the key leaves it out too),
    `tie_embeddings` of a kind other than a language model, `cuda_graphs` while off (its default; on,
    a translation trial's training step is graphed, and it is in the key), and `oov` where no table has a
    row for a rule (a random or `match`ed init: its key keeps `oov` at the default too)."""
    from embinit.task_registry import task_kind
    try:
        kind = task_kind(str(config.get("task")))
    except EmbinitError:
        return set()   # a task this code no longer knows (an older run's): leave its options as given
    idle = set() if kind.decodes else set(DECODING)
    if config.get("beam_size") in (None, 0, 1):
        idle.add("length_penalty")
    if not kind.stream:
        idle.add("tie_embeddings")
    if config.get("cuda_graphs") is False:
        idle.add("cuda_graphs")
    if not _oov_applies(config):
        idle.add("oov")
    return idle


def _oov_applies(config: dict[str, Any]) -> bool:
    """Whether the OOV rule can fill a row of the trial's tables (`TrialConfig.oov_applies`: not for a
    random init, nor a `match`ed one, whose key keeps `oov` at its default); True where it cannot tell."""
    from embinit.config import TrialConfig
    try:
        return TrialConfig.from_dict(config).oov_applies()
    except (EmbinitError, TypeError):
        return True


def planned_params(config: dict[str, Any], label: str) -> dict[str, str]:
    """The params of a planned trial (logged only when it fails before training starts): its resolved
    params without the TRAINER_RESOLVED fields the config leaves to the trainer (the task's default
    heads may not divide the source's D; `auto` is no precision). A later attempt that trains logs
    them as trained: a param, once logged, cannot change."""
    params = resolved_params(config)
    for name in TRAINER_RESOLVED:
        if config.get(name) in (None, "auto"):
            params.pop(name, None)
    return trial_params(params, label)
