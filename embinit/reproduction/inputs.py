"""What the reproduction reads: the groups of runs it compares, and their trials from MLflow."""

from __future__ import annotations

from dataclasses import dataclass

from embinit.redact import masked
from embinit.tracking import mlflow_store, records, run_readers
from embinit.errors import EmbinitError
from embinit.tracking.records import TrialRecord
from embinit.tracking.run_records import SweepRecord

ROLES = ("Xavier", "P", "P_Xavier", "P_Shuffled", "P_ShuffledElements", "Xavier_P")
ROLE_TEXT = {"Xavier": "Xavier", "P": "{p}", "P_Xavier": "{p}_Xavier", "P_Shuffled": "{p}_Shuffled",
             "P_ShuffledElements": "{p}_ShuffledElements", "Xavier_P": "Xavier_{p}"}
# the two shuffles: the paper's method section (rows and columns) and its Finding 3 ("the elements")
SHUFFLE_TEXT = {"P_Shuffled": "rows and columns", "P_ShuffledElements": "elements"}


@dataclass(frozen=True)
class Group:
    """One Table-1 block: an experiment, its task, the pretrained source's label in embinit's runs
    (`source`) and the paper's block it stands in for (`paper_source`)."""
    experiment: str
    task: str
    source: str
    paper_source: str
    spec: str            # the spec file that produced it (for the commands section)


@dataclass(frozen=True)
class BlogRun:
    """One experiment of the KNN-similarity blog post as a preset runs it, and the post's number for it."""
    experiment: str
    title: str
    spec: str
    blog_value: float     # the post's published number (its code's score, a fraction)
    blog_at: str          # "peak" or "end": where in its curve the post reads it


BLOG_RUNS = (
    BlogRun("blog-exp1-from-scratch", "experiment 1: from scratch, only the token table's init differs",
            "tune_configs/blog/blog_exp1_from_scratch.yaml", 0.26, "peak"),
    BlogRun("blog-exp1-from-scratch-offline", "experiment 1 on WikiText-2 valid (trained on the valid split)",
            "tune_configs/blog/blog_exp1_from_scratch_offline.yaml", 0.26, "peak"),
    BlogRun("blog-exp2-reinit-embeddings", "experiment 2: experiment 1's body frozen, token tables re-initialized",
            "tune_configs/blog/blog_exp2_reinit_embeddings.yaml", 0.32, "end"),
)
# tune_configs/gpu/run_batch.sh blog1 and blog2: experiment 1 untied and tied in one experiment, experiment 2
# once per tying (each starts from experiment 1's best.pt of the same tying)
GPU_BLOG_RUNS = (
    BlogRun("gpu-blog-exp1", "experiment 1: from scratch, only the token table's init differs (untied and tied)",
            "tune_configs/gpu/blog_exp1.yaml", 0.26, "peak"),
    BlogRun("gpu-blog-exp2-untied", "experiment 2, untied: experiment 1's body frozen, token tables re-initialized",
            "tune_configs/gpu/blog_exp2_untied.yaml", 0.32, "end"),
    BlogRun("gpu-blog-exp2-tied", "experiment 2, tied: experiment 1's body frozen, token table re-initialized",
            "tune_configs/gpu/blog_exp2_tied.yaml", 0.32, "end"),
)


@dataclass
class Inputs:
    """Where everything comes from; the defaults are the offline specs of tune_configs/offline/."""
    groups: tuple[Group, ...] = (
        Group("offline-multi30k-glove50", "multi30k", "GloVe", "GloVe", "tune_configs/offline/multi30k_glove50.yaml"),
        Group("offline-sst2-minilm", "sst2", "MiniLM", "BERT", "tune_configs/offline/sst2_minilm.yaml"),
    )
    ablation_spec: str = "tune_configs/offline/table3_ablation_glove50.yaml"
    analogy_experiment: str = "offline-table4-analogy-glove50"
    analogy_command: str = ("embinit analogy --embeddings $EMBINIT_ASSETS/glove.6B.50d.txt --questions "
                            "$EMBINIT_DATA_DIR/analogy/questions-words.txt --task multi30k --data-dir "
                            "$EMBINIT_DATA_DIR/multi30k --top 5893 --table4 --seed $S --tracking-uri $URI "
                            "--log-experiment offline-table4-analogy-glove50")
    similarity_metric: str = "jaccard"
    # issue 23's studies beyond the paper (embinit.reproduction.beyond) and where their figures go
    dose_experiment: str = "offline-dose-response-sigma"
    dose_spec: str = "tune_configs/offline/dose_response_sigma.yaml"
    oov_experiment: str = "offline-oov-rules-focus"
    oov_spec: str = "tune_configs/offline/oov_rules_focus.yaml"
    blog_runs: tuple[BlogRun, ...] = BLOG_RUNS   # the KNN-similarity post's experiments
    figure_dir: str = "reproduction"   # relative to the document (docs/), i.e. the --exports folder


GPU_ANALOGY = "gpu-table4-analogy-glove50"
# The GPU reproduction (issue 13; tune_configs/gpu/): the paper's schedule, one MLflow store.
GPU_INPUTS = Inputs(
    groups=(Group("gpu-multi30k-glove50", "multi30k", "GloVe", "GloVe", "tune_configs/gpu/multi30k_glove50.yaml"),
            Group("gpu-sst2-minilm", "sst2", "MiniLM", "BERT", "tune_configs/gpu/sst2_minilm.yaml"),
            Group("gpu-multi30k-xavier300", "multi30k", "GloVe", "GloVe",
                  "tune_configs/gpu/multi30k_xavier300.yaml")),
    ablation_spec="tune_configs/gpu/table3_ablation_glove50.yaml",
    analogy_experiment=GPU_ANALOGY,
    analogy_command=Inputs.analogy_command.replace("offline-table4-analogy-glove50", GPU_ANALOGY),
    dose_experiment="gpu-dose-response-sigma", dose_spec="tune_configs/gpu/dose_response_sigma.yaml",
    blog_runs=GPU_BLOG_RUNS)
PAPER_ANALOGY = "paper-table4-analogy"
# The paper's own experiments (tune_configs/paper/, for data and GPUs at the paper's scale): the 12 Table-1
# blocks, each its own spec and experiment; Table 3's cells are recorded into the Multi30k GloVe one. The
# paper's specs have no analogy run or studies beyond the paper: their sections say "not in this store"
# (the analogy command is the paper's Table 4 on GloVe 300d; the studies are the GPU preset's specs).
PAPER_INPUTS = Inputs(
    groups=(Group("paper-sst2-glove", "sst2", "GloVe", "GloVe", "tune_configs/paper/sst2_glove.yaml"),
            Group("paper-sst2-bert", "sst2", "BERT", "BERT", "tune_configs/paper/sst2_bert.yaml"),
            Group("paper-sst2-t5", "sst2", "T5", "T5", "tune_configs/paper/sst2_t5.yaml"),
            Group("paper-mnli-glove-grid", "mnli", "GloVe", "GloVe", "tune_configs/paper/mnli_glove.yaml"),
            Group("paper-mnli-bert", "mnli", "BERT", "BERT", "tune_configs/paper/mnli_bert.yaml"),
            Group("paper-mnli-t5", "mnli", "T5", "T5", "tune_configs/paper/mnli_t5.yaml"),
            Group("paper-multi30k-glove", "multi30k", "GloVe", "GloVe", "tune_configs/paper/multi30k_glove.yaml"),
            Group("paper-multi30k-mbert", "multi30k", "mBERT", "BERT", "tune_configs/paper/multi30k_mbert.yaml"),
            Group("paper-multi30k-mt5", "multi30k", "mT5", "T5", "tune_configs/paper/multi30k_mt5.yaml"),
            Group("paper-iwslt2017-glove", "iwslt2017", "GloVe", "GloVe", "tune_configs/paper/iwslt2017_glove.yaml"),
            Group("paper-iwslt2017-mbert", "iwslt2017", "mBERT", "BERT", "tune_configs/paper/iwslt2017_mbert.yaml"),
            Group("paper-iwslt2017-mt5", "iwslt2017", "mT5", "T5", "tune_configs/paper/iwslt2017_mt5.yaml")),
    ablation_spec="tune_configs/paper/table3_ablation.yaml",
    analogy_experiment=PAPER_ANALOGY,
    analogy_command=Inputs.analogy_command.replace("glove.6B.50d", "glove.840B.300d")
    .replace("offline-table4-analogy-glove50", PAPER_ANALOGY),
    dose_experiment=GPU_INPUTS.dose_experiment, dose_spec=GPU_INPUTS.dose_spec)
PRESETS = {"gpu": GPU_INPUTS, "offline": Inputs(), "paper": PAPER_INPUTS}


class Trial(TrialRecord):
    """A trial record with the Table-3 cell it belongs to."""

    @property
    def cell(self) -> tuple[bool, bool]:
        return bool(self.config.get("train_embeddings", True)), bool(self.config.get("pos_encoding", True))


def role_of(label: str, source: str) -> str | None:
    """'GloVe_Xavier' with source 'GloVe' -> 'P_Xavier'; None for labels of another source."""
    for role, text in ROLE_TEXT.items():
        if text.format(p=source) == label:
            return role
    return None


def load_trials(experiment: str, uri: str | None) -> tuple[list[Trial], list[SweepRecord]]:
    """(the experiment's trials, the run that stands for each key, and its sweep runs, oldest first)."""
    exp_id = mlflow_store.experiment_id(experiment, uri)
    if exp_id is None:
        where = masked(mlflow_store.resolve_uri(uri))
        raise EmbinitError(f"no MLflow experiment {experiment!r} in {where}; run its spec "
                           "first (see docs/reproduction.md, 'Commands')")
    trials = [Trial(**vars(rec)) for rec in records.by_key(run_readers.trial_records(exp_id, uri)).values()]
    return trials, run_readers.sweep_records(exp_id, uri)


def _experiments(inputs: Inputs) -> list[str]:
    """The experiments that tell a preset's store apart: the paper's groups, the analogy runs and its
    dose-response study (a store with only that still makes a document, the paper's sections marked not
    run). The OOV-rule study is CPU-only and shared by both presets, so it does not choose one."""
    return [g.experiment for g in inputs.groups] + [inputs.analogy_experiment, inputs.dose_experiment]


def choose_inputs(name: str, uri: str | None) -> str:
    """The preset to read: `name`, or for "auto" the first of gpu, offline whose experiments the store
    holds. Raises EmbinitError naming each preset's experiments and what the store has, when the one
    asked for (or every one, for auto) has none there."""
    names = ("gpu", "offline") if name == "auto" else (name,)
    for n in names:
        if any(mlflow_store.experiment_id(e, uri) is not None for e in _experiments(PRESETS[n])):
            return n
    have = sorted(e.name for e in mlflow_store.client(uri).search_experiments() if e.name != "Default")
    wants = "; ".join(f"--inputs {n} reads {', '.join(_experiments(PRESETS[n]))}" for n in PRESETS)
    other = [n for n in PRESETS if n not in names
             and any(mlflow_store.experiment_id(e, uri) is not None for e in _experiments(PRESETS[n]))]
    hint = f"; use --inputs {other[0]}, whose experiments are there" if other else \
        "; run their specs first (tune_configs/gpu/run_batch.sh, tune_configs/offline/reproduce.sh or "\
        "tune_configs/paper/)"
    where = masked(mlflow_store.resolve_uri(uri))
    raise EmbinitError(f"none of the reproduction's experiments ({'--inputs ' + name}) are in "
                       f"{where}, which holds {have or 'no experiments'}. {wants}{hint}")
