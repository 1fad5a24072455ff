"""`embinit train`'s checks before it trains: the one-trial spec its flags describe (`as_spec`) goes through
a spec's checks (`check_args`), and each problem is said in the command's words, by its flags (`--init`,
`--d-model`), not by the spec's places (`inits[0]`, "set `d_model`")."""

from __future__ import annotations

import re

from embinit.errors import ListedError

# TrialConfig fields set by the flag of the same name
FIELD_FLAGS = ("task", "init", "src_init", "pretrained", "src_pretrained", "init_from", "oov", "tokenizer",
               "seed", "emb_seed", "data_seed", "epochs", "batch_size", "max_tokens", "lr", "d_model", "layers",
               "heads", "ff_dim", "dropout", "attention_dropout", "activation_dropout", "min_freq", "max_len",
               "max_train_examples", "threads", "beam_size",
               "length_penalty", "early_stopping_patience", "pe_base", "pe_positions", "data_dir", "data_revision",
               "precision", "device", "task_def")

# the spec field each flag fills (what `check_args` names a problem by)
_SPEC_FLAGS = {"inits[0].src_pretrained": "--src-pretrained", "inits[0].pretrained": "--pretrained",
               "inits[0].src": "--src-init", "inits[0].tgt": "--init", "inits[0]": "--init",
               "tasks[0].task": "--task", "tasks[0]": "--task", "seeds": "--seed", "seeds[0]": "--seed",
               "define_tasks": "--task-def"}
# the option that gives a pretrained init its file, by the place of the init in the one-trial spec
_PRETRAINED_FLAGS = {"inits[0]": "--pretrained", "inits[0].tgt": "--pretrained",
                     "inits[0].src": "--src-pretrained"}


def as_spec(cfg) -> dict:
    """The one-trial experiment spec that trains `cfg`, so `embinit train` runs the spec's checks."""
    from embinit.config import HYPERPARAMETERS, TrialConfig
    from embinit.task_registry import TASKS, task_kind

    defaults = TrialConfig(task=cfg.task)
    hyper = {k: getattr(cfg, k) for k in HYPERPARAMETERS
             if getattr(cfg, k) != getattr(defaults, k) and k not in ("threads", "device")}
    # TrialConfig's source side is (src_init or init, src_pretrained or pretrained)
    translation = cfg.task in TASKS and task_kind(cfg.task).two_sided
    src = cfg.src_init or (cfg.init if cfg.src_pretrained and translation else None)
    # --src-pretrained defaults to --pretrained (as the trial reads it) for a source init with a pretrained
    # source; the spec's entry has no such default, so it is written out
    src_path = cfg.src_pretrained or (cfg.pretrained if src is not None and translation and _source(src)
                                      else None)
    init = {"tgt": cfg.init, "src": src, "pretrained": cfg.pretrained, "src_pretrained": src_path}
    pin = {"data_revision": cfg.data_revision} if cfg.data_revision is not None else {}
    return {"name": "train", "tasks": [{"task": cfg.task, "data_dir": cfg.data_dir, **pin, **hyper}],
            "inits": [{k: v for k, v in init.items() if v is not None}], "seeds": [cfg.seed],
            **({"define_tasks": {cfg.task: cfg.task_def}} if cfg.task_def is not None else {})}


def _source(init) -> str | None:
    """The pretrained source family of an init flag's value; None for a random init, and for one that
    does not parse (`--init glvoe`: the spec's check names it, beside the flags' other problems)."""
    from embinit.errors import EmbinitError
    from embinit.spec.inits import source_name
    try:
        return source_name(init)
    except EmbinitError:
        return None


def check_args(cfg) -> None:
    """What a spec would refuse about this trial (an option no table uses, an unknown name, a missing
    file or data file, a d_model/heads that cannot fit), as one error naming the flags (a `ListedError`:
    one a line, as `embinit run` prints a spec's)."""
    from embinit.spec import SpecError
    from embinit.spec.full_check import spec_problems

    try:
        _, problems, notes = spec_problems(as_spec(cfg))
    except SpecError as e:
        problems, notes = e.problems, e.notes
    if problems:
        problems = [(where, _problem_in_flags(cfg, where, msg)) for where, msg in problems]
        raise ListedError(f"cannot train this trial ({len(problems)} problem{'s' if len(problems) != 1 else ''}):",
                          [f"{_flag(where)}: {msg}" if _flag(where) else msg for where, msg in problems], notes)


# a spec's place (`inits[0]`, `tasks[0].heads`) or a backquoted field (`d_model`, "set `d_model` on the task")
# in a problem's message, which this command names by its flag
_SPEC_WORDS = re.compile(r"\b(?:inits|tasks|seeds)\[0\](?:\.\w+)?|`(\w+)`(?: on the task)?")


def _problem_in_flags(cfg, where: str, msg: str) -> str:
    """A spec problem's message in this command's words: a pretrained init without its file names the
    option that gives it, not the spec's `pretrained:` keys; a spec's place or field a flag sets is
    that flag ("the D of --init", "set --d-model"), as `_flag` names where the problem lies; the planned
    trials a problem concerns are not named (there is one)."""
    from embinit.spec.init_checks import needs_pretrained

    for source in {_source(cfg.init), _source(cfg.src_init)} - {None}:
        if where in _PRETRAINED_FLAGS and msg == needs_pretrained(source):
            return needs_pretrained(source, f"pass its path with {_PRETRAINED_FLAGS[where]} PATH")
    # a problem of some planned trials names them (`trials sst2 x GloVe: ...`); here they are this one
    msg = re.sub(rf"^trials {re.escape(cfg.task)} x .+?: ", "", msg)
    return in_flags(msg)


def in_flags(msg: str) -> str:
    """`msg` with a spec's place or a field a flag sets named by that flag (the size a trial itself refuses
    too, `embinit train`'s `_train`)."""
    return _SPEC_WORDS.sub(_word_flag, msg)


def _word_flag(m: re.Match) -> str:
    if m[1] is None:   # a place in the one-trial spec
        return _flag(m[0]) or m[0]
    return _flag(m[1]) if m[1] in FIELD_FLAGS else m[0]


def _flag(where: str) -> str | None:
    if not where or where.startswith("trials "):   # a model-size problem names the trials; here there is one
        return None
    if where in _SPEC_FLAGS:
        return _SPEC_FLAGS[where]
    if where.startswith("define_tasks."):   # a problem of the definition file, at its field
        return f"--task-def {where}"
    field = where.removeprefix("tasks[0].").removeprefix("inits[0].")
    return "--" + field.split(".")[0].split("[")[0].replace("_", "-")
