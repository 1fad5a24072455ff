"""Which analogy runs the reproduction's Table 4 (and Finding 2 (b)) read: the runs of one configuration,
one run per seed of the random positions.

`tune_configs/offline/reproduce.sh` logs seeds 0-4 again each time it runs, so an experiment can hold
several runs of one seed: each is the same computation, and counting them as seeds would grow n and
narrow the interval on copies. Only the newest finished run of each seed counts.

A configuration is what a run was logged with except its seed (`embinit analogy`'s params: embeddings,
questions, --task/--vocab, --top, max_len, ...; the embeddings, questions and vocabulary files by their
name, so a store moved to another machine keeps its configuration). Runs of different configurations
are not pooled: the table shows the configuration the reproduction's own command logs
(`Inputs.analogy_command`), else the one with the most seeds, and says what it left out.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from embinit.tracking.records import stand_ins
from embinit.tracking.run_records import AnalogyRun

FILE_PARAMS = ("embeddings", "questions", "vocab")   # compared by file name
_FLAGS = {"--embeddings": "embeddings", "--questions": "questions", "--task": "task", "--vocab": "vocab",
          "--top": "top"}


@dataclass(frozen=True)
class Table4Runs:
    """The runs Table 4 reads (by seed), and one line per run or configuration it left out."""

    runs: list[AnalogyRun] = field(default_factory=list)
    repeated: list[str] = field(default_factory=list)     # older runs of a seed shown
    other_configs: list[str] = field(default_factory=list)  # runs of a configuration not shown


def _norm(key: str, value: Any) -> Any:
    if value is None or value == "":
        return ""
    if key in FILE_PARAMS:
        return PurePath(str(value)).name
    return str(value)   # params read back as logged: 5893 and "5893" are one value


DESCRIPTIVE = ("seed", "vocab_words")   # not the configuration: the positions' seed; a count older runs lack


def configuration(run: AnalogyRun) -> dict[str, Any]:
    """What the run computed with, but its seed and the restriction's size (`vocab_words`, which follows
    from --task/--vocab and --top; runs logged before it was recorded have none) (file params by their
    name, values as text)."""
    return {k: _norm(k, v) for k, v in sorted(run.params.items()) if k not in DESCRIPTIVE}


def expected(command: str) -> dict[str, Any]:
    """The params the reproduction's analogy command sets (`Inputs.analogy_command`), normalized as
    `configuration` normalizes a run's; a param the command leaves unset is not part of it."""
    words = shlex.split(command)
    return {_FLAGS[w]: _norm(_FLAGS[w], nxt) for w, nxt in zip(words, words[1:]) if w in _FLAGS}


def _matches(config: dict[str, Any], want: dict[str, Any]) -> bool:
    return bool(want) and all(config.get(k, "") == v for k, v in want.items())


def _seeds(runs: list[AnalogyRun]) -> str:
    return ", ".join(dict.fromkeys(str(r.seed) for r in runs))


def select(results: list[AnalogyRun], started: dict[str, int], want: dict[str, Any]) -> Table4Runs:
    """Table 4's runs among `results` (readable analogy runs; `started`: run id -> start time): one
    configuration -- the one matching `want` (`expected`), else the one with the most distinct seeds,
    the newest on a tie -- and in it the newest run of each seed, sorted by seed."""
    if not results:
        return Table4Runs()
    by_config: dict[str, list[AnalogyRun]] = {}
    for r in sorted(results, key=lambda r: started.get(r.run_id, 0)):   # oldest first
        by_config.setdefault(json.dumps(configuration(r), sort_keys=True), []).append(r)

    def rank(text: str) -> tuple:
        runs = by_config[text]
        return (_matches(json.loads(text), want), len({str(r.seed) for r in runs}),
                max(started.get(r.run_id, 0) for r in runs))
    chosen = max(by_config, key=rank)
    # the newest run of each seed: the rule that picks a trial's run (records.stand_ins), all of equal rank
    newest = stand_ins(by_config[chosen], lambda r: str(r.seed), start=lambda r: started.get(r.run_id, 0),
                       strength=lambda r: 0)
    kept = {r.run_id for r in newest.values()}
    repeated = [f"run '{r.name}' ({r.run_id}): seed {r.seed} again; the newest run of that seed, "
                f"'{newest[str(r.seed)].name}' ({newest[str(r.seed)].run_id}), counts"
                for r in by_config[chosen] if r.run_id not in kept]
    shown = json.loads(chosen)
    others = []
    for text, runs in by_config.items():
        if text == chosen:
            continue
        config = json.loads(text)
        differ = sorted(k for k in shown.keys() | config.keys() if shown.get(k, "") != config.get(k, ""))
        what = ", ".join(f"{k} `{config.get(k, '')}` (shown: `{shown.get(k, '')}`)" for k in differ)
        others.append(f"{len(runs)} run{'s' if len(runs) != 1 else ''} (seeds {_seeds(runs)}) of another "
                      f"configuration: {what}")
    return Table4Runs(sorted(newest.values(), key=lambda r: str(r.seed)), repeated, others)


def vocabulary_text(params: dict[str, Any]) -> str:
    """Which words the runs' analogies were restricted to, as `embinit analogy` chose them (--task,
    --vocab, --top alone or nothing)."""
    top, task, vocab, held = (_norm(k, params.get(k)) for k in ("top", "task", "vocab", "vocab_words"))
    words = params.get("words")
    found = f" ({words} found in the vectors)" if words not in (None, "") else ""
    if (task or vocab) and top and held and int(float(held)) < int(float(top)):   # --top above the size: all
        where = f"target words of `{task}`" if task else f"words of the vocabulary file `{vocab}`"
        return f"all {held} {where} (`--top {top}` is more than there are){found}"
    if task:
        return f"the {top + ' ' if top else ''}most frequent target words of `{task}`{found}"
    if vocab:
        return f"the {top + ' ' if top else ''}first words of the vocabulary file `{vocab}`{found}"
    if top:
        return f"the first {top} rows of the embeddings file (no --task or --vocab)"
    return f"every word of the embeddings file{found}"
