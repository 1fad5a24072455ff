"""`load_task`: find a task's data, tokenize it, build vocabularies, cache the result."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from embinit import bounds, config, sound_marks
from embinit.content_hash import entry_lock, stamp
from embinit.errors import EmbinitError
from embinit.task_registry import kind_entry, load, task_entry, task_kind
from embinit.tasks import cache, hub, local, synthetic
from embinit.tasks.build import build
from embinit.tasks.data import TaskData
from embinit.tasks.raw import RawData, lm_split_map
from embinit.tasks.tokenization import TokenizerSpec, resolve_tokenizer
from embinit.tasks.tokenizer_backends import detokenizer

DATA_ENV = "EMBINIT_DATA_DIR"


@dataclass
class Source:
    """Where a task's raw data comes from: its cache identity and how to read it."""

    folder: Path | None          # the task's local folder (also searched for GPT-2 files)
    identity: list
    read: Callable[[], RawData]


def task_folder(task: str, data_dir, data_revision: str | None = None) -> Path | None:
    """The local folder `task`'s files are read from: data_dir (must be a folder), else
    $EMBINIT_DATA_DIR/<task>/ if it exists, unless a `data_revision` pins the hub dataset; None:
    generated, or read from the hub."""
    if task_entry(task).generate:
        return None
    if data_dir is not None:
        if data_revision is not None:   # the spec's check and the trainer's refuse it first
            raise EmbinitError(f"{task}: data_revision {data_revision!r} pins the hub dataset, but data_dir "
                               f"{str(data_dir)!r} is a data folder to read: give one of them")
        folder = Path(data_dir).expanduser()
        if not folder.is_dir():
            raise EmbinitError(f"{task}: data folder {str(folder)!r} (--data-dir / data_dir) is not a folder")
        return folder
    if data_revision is not None:   # a pinned snapshot is read from the hub, whatever $EMBINIT_DATA_DIR holds
        return None
    root = os.environ.get(DATA_ENV)
    folder = Path(root).expanduser() / task if root else None
    return folder if folder is not None and folder.is_dir() else None


def data_origin(task: str, data_dir, data_revision: str | None = None) -> str:
    """Where `locate` reads the task's data from, in this process: `local:<folder>`, `hub:<dataset>` (with
    `@<commit>` of the snapshot where the hub cache has one) or `generated`. A trial without data_dir has
    one key whichever it is, so its run records this. A `data_revision` that is no commit is said beside
    the commit it read, as `hf_cache.snapshot_text` says a model's pin: `hub:<dataset>@<commit> (pinned: v1)`."""
    if task_entry(task).generate:
        return "generated"
    folder = task_folder(task, data_dir, data_revision)
    if folder is not None:
        return f"local:{folder.resolve()}"
    if task_entry(task).hub is None:
        return "none: no data folder"
    name = hub.hub_name(task)
    commit = hub.snapshot_commit(task, data_revision)   # the repository's: the name adds the config
    if data_revision is None:
        return f"hub:{name}" + (f"@{commit}" if commit else "")
    pinned = f" (pinned: {data_revision})" if data_revision != commit else ""
    return f"hub:{name}@{commit or 'unknown (not in the hub cache)'}{pinned}"


def source_splits(task: str, train_split: str | None = None, eval_split: str | None = None) -> dict[str, str] | None:
    """TaskData split -> the source split it is read from (None for a generated task)."""
    layout, stream = task_entry(task).layout, task_kind(task).stream
    return lm_split_map(task, stream, train_split, eval_split) or \
        ({s: s for s in layout.files} if layout else None)


def check_files(task: str, data_dir=None, train_split: str | None = None, eval_split: str | None = None,
                advice: hub.DataAdvice | None = None) -> None:
    """What `load_task` would refuse about a task's local files, found without tokenizing them (a
    preflight for sweeps, before Ray or MLflow): a data_dir that is no folder, a required file missing
    (every one named), and what reading the files there refuses (`local.read_local`: bad rows, misaligned
    or one-sided blank parallel lines, lines that are not UTF-8; every file's problems). A version of the
    files read without a problem is not read again in this process (the service checks every submission),
    nor, once marked (`embinit.sound_marks`), by a later one."""
    folder = task_folder(task, data_dir)
    entry = task_entry(task)
    if folder is None and not entry.generate and entry.hub is None:   # a task defined in a spec
        raise EmbinitError(f"{task}: no data folder (give its data_dir, or the spec's data_dir with a folder "
                           f"{task}/ in it), and the task has no copy on the hub")
    splits = source_splits(task, train_split, eval_split)
    if folder is None:   # read from the hub: offline, only from its cache (every trial would fail)
        if (why := hub.offline_uncached(task)) is not None:
            raise hub.no_data_error(task, splits, _where_looked(task, advice), why, advice)
        return
    layout = entry.layout
    try:
        files = local.find_files(task, layout, folder, splits)
    except local.MissingFiles as e:   # the files it holds are read too: their problems in the same answer
        raise EmbinitError(" | ".join([str(e), *local.present_problems(task, layout, folder, splits)])) from None
    version = (task, task_entry(task).definition, str(folder.resolve()), tuple(sorted(splits.items())),
               tuple(stamp(p, p.stat()) for ps in files.values() for p in ps))
    if version not in _READ_WITHOUT_PROBLEMS:
        # files read without a problem by this code in another process (a rerun, a dry run, a restarted
        # service: MNLI's train.tsv is 300 MB, ~2 s): marked by their content and what else reading depends on
        mark = sound_marks.mark_for("data", [p for ps in files.values() for p in ps],
                                    [task, task_entry(task).definition, sorted(splits.items()),
                                     {s: [p.name for p in ps] for s, ps in sorted(files.items())}])
        if not sound_marks.marked(mark):
            local.read_local(task, layout, folder, splits)
            sound_marks.make(mark)
        _READ_WITHOUT_PROBLEMS.add(version)


_READ_WITHOUT_PROBLEMS: set = set()   # check_files: (task, folder, splits, each file's `content_hash.stamp`)


def locate(task: str, data_dir, splits: dict[str, str], seed: int, noise: float = 0.0, cache_dir=None,
           data_revision: str | None = None) -> Source:
    """data_dir (must be complete) -> $EMBINIT_DATA_DIR/<task>/ (must be complete if it exists) -> hub;
    with a `data_revision`, the hub at that revision."""
    synthetic.check_noise(task, noise)
    entry = task_entry(task)
    if entry.generate:
        identity = ["generated", seed] + ([noise] if noise else [])  # noise 0: the same entry as before
        return Source(None, identity, lambda: load(entry.generate)(task, seed, splits, noise))
    layout = entry.layout
    folder = task_folder(task, data_dir, data_revision)
    if folder is None:
        looked = _where_looked(task)
        if entry.hub is None:   # a task defined in a spec has its files only
            raise EmbinitError(f"{task}: {looked}, and the task has no copy on the hub: give its data_dir")
        if data_revision is not None:
            looked = f"data_revision {data_revision!r} pins the hub dataset"
        # the snapshot read, where known (the pinned one, else the one the hub cache's main names): data
        # read from another commit (the dataset's `main` moved and was fetched again, another pin) is
        # another entry, as the run's data source says. A pin not fetched yet is keyed by the revision as
        # written, until the hub cache names its commit.
        commit = hub.snapshot_commit(task, data_revision)
        identity = ["hub", hub.hub_name(task)] + ([commit] if commit else (
            [f"revision {data_revision}"] if data_revision is not None else []))
        return Source(None, identity, lambda: hub.load_hub(task, splits, looked, data_revision))
    identity = ["local", local.file_identity(task, layout, folder, splits, cache_dir)]
    if entry.definition:   # a task defined in a spec: how its files are read is part of what was read
        identity.append(entry.definition)
    return Source(folder, identity, lambda: local.read_local(task, layout, folder, splits))


def _where_looked(task: str, advice: hub.DataAdvice | None = None) -> str:
    """Where a task without a data folder was looked for locally, for the no-data error, in the words of
    `advice` (None: the one in effect, `hub.current_advice`: a trial's caller's)."""
    advice = hub.current_advice(advice)
    root = os.environ.get(DATA_ENV)
    return (f"{advice.not_given}; {advice.env}/{task} = {Path(root).expanduser() / task} does not exist"
            if root else f"{advice.not_given} and {advice.env} not set")


def _check_args(min_freq, max_train_examples, max_len) -> None:
    """Integers within their bounds (embinit.bounds, the same the spec and the trainer apply)."""
    problems = []
    for name, value in (("min_freq", min_freq), ("max_train_examples", max_train_examples), ("max_len", max_len)):
        if value is None and name == "max_train_examples":
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            problems.append(f"{name} must be an integer, got {value!r}")
        elif (problem := bounds.problem(name, value)) is not None:
            problems.append(problem)
    if problems:
        raise EmbinitError("; ".join(problems))


def _tokenizers(task: str, kind: str, name: str, lowercase: bool, folder: Path | None):
    """(source-side spec or None, target-side spec). spaCy's language: German for the source side of the
    two-sided (translation) tasks, English everywhere else."""
    entry = task_entry(task)
    if name == "auto":
        name = entry.tokenizer
    tgt = resolve_tokenizer(name, "en", lowercase, folder)
    if not kind_entry(kind).two_sided:
        return None, tgt
    src_lang = entry.layout.src_lang if entry.layout else "de"
    return resolve_tokenizer(name, src_lang, lowercase, folder), tgt


@dataclass
class Plan:
    """What a load will do, decided without reading data or loading a tokenizer (cheap): enough to
    compute the cache key."""

    task: str
    kind: str
    splits: dict[str, str] | None
    source: Source
    src_spec: TokenizerSpec | None
    tgt_spec: TokenizerSpec
    full_vocab: bool
    key: str


def plan(task: str, data_dir=None, tokenizer: str = "spacy", min_freq: int = 2,
         max_train_examples: int | None = None, max_len: int = 256, seed: int = 0, lowercase: bool = True,
         train_split: str | None = None, eval_split: str | None = None, noise: float = 0.0,
         cache_dir=None, data_revision: str | None = None) -> Plan:
    kind = config.task_defaults(task).kind
    _check_args(min_freq, max_train_examples, max_len)
    stream = kind_entry(kind).stream
    splits = source_splits(task, train_split, eval_split)
    source = locate(task, data_dir, splits, seed, noise, cache_dir or None, data_revision)
    src_spec, tgt_spec = _tokenizers(task, kind, tokenizer, bool(lowercase), source.folder)
    full_vocab = stream and tgt_spec.name == "gpt2"
    parts = {"task": task, "source": source.identity, "splits": splits, "tokenizer": tgt_spec.identity,
             "src_tokenizer": src_spec.identity if src_spec else None, "min_freq": min_freq,
             "max_train_examples": max_train_examples, "max_len": max_len, "full_vocab": full_vocab,
             "data_version": cache.DATA_VERSION, "code_version": config.CODE_VERSION}
    return Plan(task, kind, splits, source, src_spec, tgt_spec, full_vocab, cache.cache_key(parts))


def load_task(task: str, data_dir: str | Path | None = None, tokenizer: str = "spacy", min_freq: int = 2,
              max_train_examples: int | None = None, max_len: int = 256,
              cache_dir: str | Path | None | bool = None, seed: int = 0, lowercase: bool = True,
              train_split: str | None = None, eval_split: str | None = None, noise: float = 0.0,
              data_revision: str | None = None) -> TaskData:
    """Load one task as TaskData (see docs/architecture.md, "tasks").

    data_dir: the task's own folder in its raw form; else $EMBINIT_DATA_DIR/<task>/; else the Hugging Face
      hub (the task's `Hub` in embinit.task_registry). tokenizer: "spacy" | "whitespace" | "gpt2" | "auto" (GPT-2 for
      wikitext2, spaCy otherwise) | a Hugging Face tokenizer folder or hub id. lowercase: word-level
      tokenizers only (GloVe 6B is uncased). cache_dir: root of embinit's caches (entries go to
      `<root>/tasks`); False disables caching. seed: used by the synthetic tasks only. train_split /
      eval_split: LM tasks only, which source split trains and which validates (see raw.lm_split_map).
      noise: synthetic_translation only, the chance that a training target word is replaced by a random
      one (see synthetic.translation); a spec sets it as `extras: {noise: 0.2}`. data_revision: the commit,
      tag or branch of the task's hub dataset to read (no data_dir then; $EMBINIT_DATA_DIR is not looked at).
    """
    start = time.perf_counter()
    p = plan(task, data_dir, tokenizer, min_freq, max_train_examples, max_len, seed, lowercase,
             train_split, eval_split, noise, cache_dir=cache_dir if cache_dir is not False else None,
             data_revision=data_revision)
    path = None if cache_dir is False else cache.entry_path(cache.cache_root(cache_dir or None), task, p.key)
    payload = cache.load(path) if path else None
    status = "hit" if payload else ("off" if path is None else "miss")
    if payload is None:
        with entry_lock(path):   # concurrent trials: the first tokenizes, the others wait and read
            payload = cache.load(path) if path else None
            status = "hit" if payload else status
            if payload is None:
                payload = build(p.source.read(), p.src_spec, p.tgt_spec, min_freq, max_train_examples,
                                max_len, p.full_vocab)
                payload["info"].update(_describe(p, min_freq, max_train_examples, max_len, seed))
                if path:
                    cache.save(path, payload)
    info = {**payload["info"], "cache": status, "cache_key": p.key, "cache_path": str(path) if path else None,
            "load_time_s": round(time.perf_counter() - start, 3)}
    return TaskData(name=task, kind=p.kind, vocab=payload["vocab"], src_vocab=payload["src_vocab"],
                    splits=payload["splits"], eval_splits=payload["eval_splits"],
                    references=payload["references"], detokenize=detokenizer(p.tgt_spec),
                    num_labels=payload["num_labels"], info=info)


def _describe(p: Plan, min_freq, max_train_examples, max_len, seed) -> dict:
    info = {"task": p.task, "kind": p.kind, "tokenizer": p.tgt_spec.name,
            "tokenizer_source": p.tgt_spec.source, "min_freq": min_freq,
            "max_train_examples": max_train_examples, "max_len": max_len}
    if p.src_spec is not None:
        info["src_lang"], info["tgt_lang"] = p.src_spec.lang, p.tgt_spec.lang
    if kind_entry(p.kind).stream:
        info["split_sources"] = dict(p.splits)
    if task_entry(p.task).generate:
        info["seed"] = seed
    return info
