"""Prepare once per sweep: concurrent trials never tokenize the same task (or align the same pretrained
file) more than once, and the cache keys hold across folders with the same file contents."""

import dataclasses
import shutil
import threading
import time
from pathlib import Path

import pytest

from embinit.config import TrialConfig
from embinit.errors import EmbinitError
from embinit.init import table as init_build
from embinit.sweep.work import Unit, WorkItem
from embinit.sweep.warmup import distinct_configs, prepare_configs, prepare_on_ray, prepare_units
from embinit.tasks import load as task_load
from embinit.tasks.synthetic import LEXICON
from embinit.train import run_trial


@pytest.fixture
def counted(monkeypatch):
    """Counts tokenizations (`build` of a task) and reads of a pretrained text file; each is slow
    enough that concurrent callers overlap."""
    counts = {"tokenize": 0, "align": 0}
    real_build, real_text = task_load.build, init_build.LOADERS["text"]

    def build(*a, **kw):
        counts["tokenize"] += 1
        time.sleep(0.3)
        return real_build(*a, **kw)

    def text(*a, **kw):
        counts["align"] += 1
        time.sleep(0.3)
        return real_text(*a, **kw)

    monkeypatch.setattr(task_load, "build", build)
    monkeypatch.setitem(init_build.LOADERS, "text", text)
    return counts


def vectors(path, dim=8):
    words = sorted(set(LEXICON.values()))
    path.write_text("".join(f"{w} " + " ".join(f"{(i % 7) / 10:.1f}" for i in range(dim)) + "\n" for w in words))
    return str(path)


def configs(vec, seeds=3):
    base = {"task": "synthetic_translation", "epochs": 1, "max_train_examples": 64, "threads": 1,
            "extras": {"val_bleu": False}}
    return [TrialConfig(init=init, pretrained=vec if init == "glove" else None, seed=s, **base)
            for init in ("glove", "xavier") for s in range(seeds)]


def run_concurrently(cfgs, cache):
    errors = []

    def one(cfg):
        try:
            run_trial(cfg, cache_dir=cache)
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=one, args=(c,)) for c in cfgs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


@pytest.mark.slow
def test_prepared_sweep_tokenizes_once_for_all_concurrent_trials(counted, tmp_path):
    cfgs = configs(vectors(tmp_path / "vec.txt"))
    assert len(distinct_configs(cfgs)) == 2          # seeds share; the two inits differ
    units = [Unit((WorkItem(c.to_dict(), "l", {}, {}, ("val/loss", "min"), c.key()),)) for c in cfgs]
    out = prepare_units(units, tmp_path / "cache")
    assert out == {"prepared": 2, "skipped": []}
    # one tokenization of the task; the pretrained file aligned once per side (source, target vocab)
    assert counted == {"tokenize": 1, "align": 2}
    run_concurrently(cfgs, tmp_path / "cache")       # 6 trials at once: all read the cache
    assert counted == {"tokenize": 1, "align": 2}


@pytest.mark.slow
def test_concurrent_trials_on_a_cold_cache_tokenize_once(counted, tmp_path):
    """Without the preparation step (e.g. an Optuna search), the entry lock still lets one trial
    build while the others wait and read (before: each of the 3 tokenized and aligned itself)."""
    cfgs = [c for c in configs(vectors(tmp_path / "vec.txt")) if c.init == "glove"]
    run_concurrently(cfgs, tmp_path / "cache")
    assert counted == {"tokenize": 1, "align": 2}    # once per side


def test_failing_setting_is_skipped_for_its_trials_to_report(tmp_path):
    bad = TrialConfig(task="synthetic_translation", init="glove", pretrained=str(tmp_path / "missing.txt"))
    out = prepare_configs([bad], tmp_path / "cache")
    assert out["prepared"] == 0 and "missing.txt" in out["skipped"][0]


def test_cache_is_keyed_by_content_not_path(counted, tmp_path):
    """A cache made with the files in one folder is a hit for a copy of them elsewhere (another node)."""
    (tmp_path / "a").mkdir()
    vec = vectors(tmp_path / "a" / "vec.txt")
    cfg = configs(vec, seeds=1)[0]
    prepare_configs([cfg], tmp_path / "cache")
    (tmp_path / "b").mkdir()
    copy = shutil.copy(vec, tmp_path / "b" / "vec.txt")
    time.sleep(0.01)
    (tmp_path / "b" / "vec.txt").touch()             # other path, other mtime, same bytes
    prepare_configs([TrialConfig(**{**cfg.to_dict(), "pretrained": str(copy)})], tmp_path / "cache")
    assert counted["align"] == 2                     # source and target side, built once
    (tmp_path / "b" / "vec.txt").write_text(Path(vec).read_text().replace("0.1", "0.2"))
    prepare_configs([TrialConfig(**{**cfg.to_dict(), "pretrained": str(copy)})], tmp_path / "cache")
    assert counted["align"] == 4                     # other content: a miss


def test_embedding_seeds_and_position_counts_share_one_warmup():
    """emb_seed and pe_positions change neither the tokenized task nor the aligned rows (issue 23)."""
    base = TrialConfig(task="synthetic_lm", seed=0)
    cfgs = [dataclasses.replace(base, emb_seed=e, pe_positions=p) for e in (1, 2) for p in (512, 5000)]
    assert len(distinct_configs(cfgs)) == 1


def _warmup_alive() -> list[str]:
    """The warm-up threads running now."""
    return [t.name for t in threading.enumerate() if t.name == "embinit-warmup" and t.is_alive()]


def _wait_for(test, timeout=60.0):
    end = time.monotonic() + timeout
    while not (found := test()) and time.monotonic() < end:
        time.sleep(0.05)
    return found


@pytest.fixture
def stand_in(monkeypatch):
    """`stand_in("slow_write")`: the warm-up's work replaced by a stand-in (tests/helpers/warmup_fakes.py)."""
    from helpers import warmup_fakes

    from embinit.sweep import warmup

    def install(name):
        monkeypatch.setattr(warmup, "prepare_configs", warmup_fakes.FAKES[name])
    warmup_fakes.RELEASE.clear()
    yield install
    warmup_fakes.RELEASE.set()   # the old code's thread still pickling: let it end
    assert _wait_for(lambda: not _warmup_alive(), 10), "a warm-up outlived its test"


def _execute_with_fake_ray(monkeypatch, address, cache_dir, ray_start=None, **spec_fields):
    """`run._execute` of a one-task Xavier spec with Ray, its GPU check and Tune replaced: what ran the
    warm-up (this process's thread or a Ray task), and whether it had begun when Ray's start began;
    `ray_start()` in Ray's start (it may raise, as a failed start does)."""
    from embinit.spec import load_spec
    from embinit.sweep import gpu_share, run, tune_run, warmup
    from embinit.sweep.job import TuneJob
    from embinit.sweep.work import SweepContext, units_to_run
    seen = {}

    class FakeRay:   # Ray's start: takes seconds; the warm-up has begun by its end, or it never overlapped
        def __init__(self, address, resources):
            pass

        def __enter__(self):
            began = warmup_began.wait(5 if address is None else 0)
            seen["began_during_ray_start"] = began
            if ray_start is not None:
                ray_start()
            return self

        def __exit__(self, *exc):
            pass
    warmup_began = threading.Event()
    prepare_configs = warmup.prepare_configs

    def prepare_units(units, cache_dir=None, stop=None):   # records where it ran, then does the work
        seen["warmup"] = threading.current_thread().name
        warmup_began.set()
        configs = [TrialConfig.from_dict(t.config) for u in units for t in u.trials]
        return prepare_configs(configs, cache_dir, *([stop] if stop is not None else []))
    monkeypatch.setattr(warmup, "prepare_units", prepare_units)
    monkeypatch.setattr(warmup, "prepare_on_ray",
                        lambda units, cache_dir=None, say=None: seen.setdefault("warmup", "ray task"))
    monkeypatch.setattr(run, "RayRuntime", FakeRay)
    monkeypatch.setattr(gpu_share, "check_on_ray", lambda gpus: None)
    monkeypatch.setattr(tune_run, "run_tune", lambda job, units: seen.setdefault("tuned", len(units)) and False)
    spec = load_spec({"name": "w", "tasks": ["synthetic_translation"], "inits": ["xavier"], "seeds": 2,
                      "cache_dir": str(cache_dir), **spec_fields})
    units, _ = units_to_run(spec, set())
    job = TuneJob(spec, tuple(spec.plan()), SweepContext("sqlite:///x.db", "1", "p"), "/tmp", progress=False,
                  address=address)
    assert run._execute(job, units) is False
    return seen


def test_the_warm_up_runs_while_a_local_ray_starts(monkeypatch, tmp_path):
    """A Ray started here for this machine alone (no address; none connected) reads the files this process
    reads: the warm-up runs in a thread here from before Ray's start (which took 6.5 s of a CPU trial's
    12 s before its first step, docs/benchmarks.md), not as a Ray task after it (4.7 s more)."""
    seen = _execute_with_fake_ray(monkeypatch, None, tmp_path / "cache")
    assert seen == {"warmup": "embinit-warmup", "began_during_ray_start": True, "tuned": 2}
    assert list((tmp_path / "cache" / "tasks").glob("synthetic_translation-*.pkl"))   # it did the work


def test_a_cluster_s_warm_up_is_a_ray_task_where_the_workers_read(monkeypatch, tmp_path):
    seen = _execute_with_fake_ray(monkeypatch, "ray://head:10001", tmp_path / "cache")
    assert seen["warmup"] == "ray task" and seen["tuned"] == 2


@pytest.mark.parametrize("failure", [EmbinitError("cannot start Ray: port taken"), KeyboardInterrupt()])
def test_a_warm_up_stops_with_the_sweep(monkeypatch, tmp_path, stand_in, failure):
    """Ray's start fails, or Ctrl-C comes, while the warm-up writes a cache entry: the warm-up ends with the
    sweep (before: its thread went on after run_sweep had returned), and leaves no half-written entry
    (before: `embinit run` exited with the entry's `.tmp` still in the cache)."""
    from helpers.warmup_fakes import tmp_files
    stand_in("slow_write")
    cache = tmp_path / "cache"

    def ray_start():
        assert _wait_for(lambda: tmp_files(cache)), "the stand-in never began its write"
        raise failure
    with pytest.raises(type(failure), match=str(failure) or None):
        _execute_with_fake_ray(monkeypatch, None, cache, ray_start)
    assert not _warmup_alive()
    assert tmp_files(cache) == []


@pytest.mark.parametrize("name, error, text", [("embinit_error", EmbinitError, "fix the data folder"),
                                               ("runtime_error", RuntimeError, "the warm-up broke")])
def test_a_warm_up_error_is_the_sweep_s(monkeypatch, tmp_path, stand_in, name, error, text):
    stand_in(name)
    with pytest.raises(error, match=text):
        _execute_with_fake_ray(monkeypatch, None, tmp_path / "cache")


def test_a_resources_misfit_is_said_before_any_data_work(monkeypatch, tmp_path):
    """More CPUs per trial than the machine has: refused before the warm-up starts (as before the warm-up
    overlapped Ray's start), not after Ray's start, with the tokenizing already under way."""
    from embinit.sweep import warmup
    monkeypatch.setattr(warmup, "prepare_here", lambda *a: pytest.fail("the warm-up started"))
    with pytest.raises(EmbinitError, match=r"resources.cpus: 100000 per trial, but this machine's Ray has"):
        _execute_with_fake_ray(monkeypatch, None, tmp_path / "cache", resources={"cpus": 100000})


def test_a_stopped_warm_up_begins_no_further_setting(tmp_path):
    stop = threading.Event()
    stop.set()
    cfg = TrialConfig(task="synthetic_translation", init="xavier")
    assert prepare_configs([cfg], tmp_path / "cache", stop) == {"prepared": 0, "skipped": []}


@pytest.mark.parametrize("which", ["table", "focus"])
def test_a_stopped_write_of_an_init_cache_leaves_no_tmp(monkeypatch, tmp_path, which):
    """Stopped mid-write (a stopped warm-up's exception, Ctrl-C), the aligned-table and FOCUS caches remove
    their temporary file, as the task cache does (before: only an OSError was handled, the `.tmp` stayed)."""
    import numpy as np
    import torch

    from embinit.init import focus, table_cache
    from embinit.init.aligned import Aligned

    def stopped(obj, file, *a, **kw):
        Path(file).write_bytes(b"half")
        raise KeyboardInterrupt
    path = tmp_path / "entry.pt"
    with pytest.raises(KeyboardInterrupt):
        if which == "table":
            monkeypatch.setattr(torch, "save", stopped)
            table_cache.save_entry(path, Aligned(torch.zeros(1, 2), torch.zeros(1, dtype=torch.long), 2, "x"))
        else:
            monkeypatch.setattr(np, "savez", lambda file, **kw: stopped(None, file))
            focus._save(tmp_path / "entry.npz", np.zeros((1, 2)), np.zeros(1, dtype=bool))
    assert list(tmp_path.iterdir()) == []


def test_preparing_on_a_busy_cluster_says_what_it_waits_for(ray_local):
    """On a cluster whose CPUs other jobs' trials hold, the preparation task waits for one, and the sweep
    printed nothing meanwhile (for minutes, while another sweep's trials ran): it now says what it waits
    for, then prepares once a CPU frees."""
    import ray
    release = threading.Event()

    @ray.remote(num_cpus=1)
    class Holder:   # another job's trial, holding a CPU until told
        def hold(self):
            return True
    holders = [Holder.remote() for _ in range(2)]
    ray.get([h.hold.remote() for h in holders])   # both CPUs held
    notes = []
    timer = threading.Timer(1.5, lambda: ([ray.kill(h) for h in holders], release.set()))
    timer.start()
    try:
        assert prepare_on_ray([], None, notes.append, note_after_s=0.3) == {"prepared": 0, "skipped": []}
    finally:
        timer.cancel()
    assert release.is_set()   # it finished only once a CPU was freed
    assert notes == ["preparing the data waits for a free CPU on the Ray cluster (2 CPUs, 0 free: other "
                     "jobs' trials hold them); the sweep's trials start after it"]
    notes.clear()   # with a CPU free and a quick preparation: nothing to say
    assert prepare_on_ray([], None, notes.append, note_after_s=5) == {"prepared": 0, "skipped": []}
    assert notes == []
