"""Every YAML under tune_configs/ (walked recursively) parses into the spec model, and the paper's
configs carry the paper's settings: the init groups of Table 1 (+ Table 7), seeds per task, the MNLI
grid search, the Table 3 ablation."""

from __future__ import annotations

from pathlib import Path

import pytest

from embinit.task_registry import TASKS
from embinit.spec import SpecError, load_spec

ROOT = Path(__file__).resolve().parents[1] / "tune_configs"
ALL = sorted(ROOT.rglob("*.yaml")) + sorted(ROOT.rglob("*.yml"))
PAPER_SEEDS = {"mnli": 3, "multi30k": 4, "iwslt2017": 4, "sst2": 5}


@pytest.fixture(autouse=True)
def env(monkeypatch, tmp_path):
    monkeypatch.setenv("EMBINIT_ASSETS", str(tmp_path / "assets"))
    monkeypatch.setenv("EMBINIT_DATA_DIR", str(tmp_path / "data"))


def test_the_walk_finds_every_folder():
    folders = {p.parent.relative_to(ROOT).as_posix() for p in ALL}
    assert {".", "paper", "offline", "gpu"} <= folders
    assert len(ALL) >= 15


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_config_parses_and_expands(path):
    spec = load_spec(path)
    trials = spec.expand()
    assert trials and len({t.key() for t in trials}) == len(trials)
    assert all(t.task in TASKS for t in trials)
    assert spec.name == path.stem.replace("_", "-") or \
        spec.name.startswith(("paper-", "offline-", "gpu-", "quickstart"))


def test_quickstart_runs_offline_on_its_own_files():
    spec = load_spec(ROOT / "quickstart.yaml")
    assert {t.task for t in spec.tasks} == {"synthetic_translation"}
    assert [p.label for p in spec.plan()][::3] == ["Xavier", "Pretrained", "Pretrained_Xavier"]
    paths = {c.pretrained for c in spec.expand() if c.pretrained}
    assert len(paths) == 1 and Path(paths.pop()).is_file()
    assert len(spec.seeds) >= 3


PAPER = sorted((ROOT / "paper").glob("*.yaml"))


@pytest.mark.parametrize("path", PAPER, ids=lambda p: p.name)
def test_paper_seeds_per_task(path):
    spec = load_spec(path)
    (task,) = {t.task for t in spec.tasks}
    # Table 1 seeds per task; the grid search runs 2 per point; Figure 1 says five runs; Table 3's
    # epochs are means over 3 runs.
    expected = 2 if spec.search is not None else {"figure1_multi30k_glove": 5, "table3_ablation": 3}.get(
        path.stem, PAPER_SEEDS[task])
    assert len(spec.seeds) == expected


@pytest.mark.parametrize("task", ["multi30k", "iwslt2017", "sst2", "mnli"])
def test_table1_groups_for_every_task(task):
    labels = {}
    for path in PAPER:
        spec = load_spec(path)
        if [t.task for t in spec.tasks] == [task] and not spec.axes and "figure1" not in path.name:
            labels[path.stem] = {p.label for p in spec.plan()}
    sub = ("mbert", "mt5") if task in ("multi30k", "iwslt2017") else ("bert", "t5")
    names = {"mbert": "mBERT", "mt5": "mT5", "bert": "BERT", "t5": "T5"}
    assert {"Xavier", "GloVe", "GloVe_Xavier", "GloVe_Shuffled"} <= labels[f"{task}_glove"]
    for fam in sub:
        n = names[fam]
        assert labels[f"{task}_{fam}"] == {"Xavier", n, f"{n}_Xavier", f"{n}_Shuffled", f"Xavier_{n}"}


def test_table5_settings_in_paper_configs():
    m30k = load_spec(ROOT / "paper" / "multi30k_glove.yaml").expand()[0].resolved()
    assert (m30k.epochs, m30k.batch_size, m30k.lr, m30k.heads, m30k.layers) == (20, 64, 2e-4, 10, 3)
    mt5 = load_spec(ROOT / "paper" / "multi30k_mt5.yaml").expand()[0].resolved()
    assert (mt5.batch_size, mt5.d_model, mt5.tokenizer) == (96, 768, "google/mt5-base")
    mnli = load_spec(ROOT / "paper" / "mnli_glove.yaml")
    assert mnli.expand()[0].resolved().epochs == 9


def test_mnli_glove_is_a_grid_search_per_init():
    spec = load_spec(ROOT / "paper" / "mnli_glove.yaml")
    assert spec.search is not None and spec.search.method == "grid"
    points = spec.search_points()
    assert len(points) > 1
    assert len(spec.plan()) == len(spec.inits) * len(points) * 2
    assert (spec.search.metric, spec.search.mode) == ("val/acc_matched", "max")


def test_table3_ablation_axes():
    spec = load_spec(ROOT / "paper" / "table3_ablation.yaml")
    combos = {(p.label, p.axes["train_embeddings"], p.axes["pos_encoding"]) for p in spec.plan()}
    assert combos == {(label, t, pos) for label in ("Xavier", "GloVe", "GloVe_Xavier")
                      for t in (False, True) for pos in (False, True)}
    assert len(spec.seeds) == 3


def test_offline_configs_need_their_env_vars(monkeypatch):
    monkeypatch.delenv("EMBINIT_ASSETS")
    for path in sorted((ROOT / "offline").glob("*.yaml")):
        with pytest.raises(SpecError, match="EMBINIT_ASSETS is not set"):
            load_spec(path)


GPU = ROOT / "gpu"


def _gpu(name):
    spec = load_spec(GPU / f"{name}.yaml")
    return spec, spec.expand()


def test_gpu_specs_carry_the_issues_settings():
    """Issue 13's five GPU runs: the paper's schedules, the seeds it asks for, both shuffles, no Table-3
    cell with one seed, the blog's experiments untied and tied; every trial on CUDA, several per GPU."""
    spec, trials = _gpu("multi30k_xavier300")
    assert {(t.d_model, t.heads, t.epochs, t.init) for t in trials} == {(300, 10, 20, "xavier")}
    assert len(trials) == 4 and spec.execution.fuse == "auto"
    spec, trials = _gpu("multi30k_glove50")
    assert {t.epochs for t in trials} == {20} and len(spec.seeds) == 5
    assert {"glove+shuffle", "glove+shuffle_elements", "glove+standardize", "glove+match"} <= {t.init for t in trials}
    spec, trials = _gpu("table3_ablation_glove50")
    cells = {}
    for t in trials:
        cells.setdefault((t.init, t.train_embeddings, t.pos_encoding), []).append(t.seed)
    assert len(cells) == 12 and all(len(seeds) == 3 for seeds in cells.values())
    assert spec.mlflow.experiment == "gpu-multi30k-glove50" and {t.epochs for t in trials} == {20}
    spec, trials = _gpu("sst2_minilm")
    assert {t.epochs for t in trials} == {5} and len(spec.seeds) == 5
    _, trials = _gpu("blog_exp1")   # since issue 23: one trial seed, the post's two token-table seeds
    assert {(t.tie_embeddings, t.seed, t.emb_seed) for t in trials} == {
        (False, 1, 1), (False, 1, 2), (True, 1, 1), (True, 1, 2)}
    assert {(t.max_len, t.batch_size, t.lr, t.dropout, t.pre_ln) for t in trials} == {(512, 12, 1e-4, 0.2, True)}
    for tie in ("tied", "untied"):
        _, trials = _gpu(f"blog_exp2_{tie}")
        assert {t.tie_embeddings for t in trials} == {tie == "tied"} and all(t.freeze_non_embeddings for t in trials)
        assert {(t.seed, t.emb_seed) for t in trials} == {(2, 100), (2, 200)}
        assert all(t.init_from.endswith(f"blog_exp1_{tie}_best.pt") for t in trials)
    for path in GPU.glob("*.yaml"):
        spec = load_spec(path)
        assert spec.resources.gpus > 0 and all(t.device == "cuda" for t in spec.expand()), path.name


def test_gpu_specs_match_the_reproductions_inputs():
    """`embinit reproduction` (GPU preset) reads the experiments these specs write."""
    from embinit.reproduction.inputs import GPU_INPUTS
    for g in GPU_INPUTS.groups:
        assert load_spec(ROOT.parent / g.spec).name == g.experiment
    assert load_spec(ROOT.parent / GPU_INPUTS.ablation_spec).mlflow.experiment == GPU_INPUTS.groups[0].experiment
