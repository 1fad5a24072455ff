"""ExperimentSpec: parsing, expansion into TrialConfigs, hashing, and every validation error path."""

from __future__ import annotations

import pytest

from embinit.cli import dry_run
from embinit.config import TrialConfig, task_defaults
from embinit.errors import EmbinitError
from embinit.spec import ExperimentSpec, SpecError, load_spec


def base(**over):
    spec = {"name": "t", "tasks": ["synthetic_translation"], "inits": ["xavier"], "seeds": 2}
    spec.update(over)
    return spec


def problems(data) -> dict[str, str]:
    with pytest.raises(SpecError) as err:
        load_spec(data)
    assert isinstance(err.value, EmbinitError)
    return dict(err.value.problems)


# ---- parsing and expansion ---------------------------------------------------------------------------

def test_minimal_spec_expands_to_tasks_x_inits_x_seeds():
    spec = load_spec(base(tasks=["synthetic_translation", "synthetic_classification"],
                          inits=["xavier", "normal", "xavier_normal"], seeds=3))
    trials = spec.expand()
    assert len(trials) == 2 * 3 * 3 == spec.num_trials()
    assert all(isinstance(t, TrialConfig) for t in trials)
    assert {(t.task, t.init, t.seed) for t in trials} == {
        (task, init, seed) for task in ("synthetic_translation", "synthetic_classification")
        for init in ("xavier", "normal", "xavier_normal") for seed in range(3)}
    assert len({t.key() for t in trials}) == len(trials)


def test_seeds_as_count_or_list():
    assert load_spec(base(seeds=4)).seeds == [0, 1, 2, 3]
    assert load_spec(base(seeds=[7, 11])).seeds == [7, 11]
    assert [t.seed for t in load_spec(base(seeds=[7, 11])).expand()] == [7, 11]


def test_table5_defaults_apply_and_overrides_win():
    spec = load_spec(base(tasks=["multi30k", {"task": "sst2", "epochs": 2, "lr": 5e-4}], inits=["xavier"],
                          seeds=1, defaults={"precision": "bf16", "epochs": 7}))
    by_task = {t.task: t.resolved() for t in spec.expand()}
    assert by_task["multi30k"].batch_size == task_defaults("multi30k").batch_size
    assert by_task["multi30k"].lr == task_defaults("multi30k").lr
    assert by_task["multi30k"].epochs == 7                    # spec-wide default beats Table 5
    assert by_task["sst2"].epochs == 2 and by_task["sst2"].lr == 5e-4  # the task's own beats both
    assert {t.precision for t in by_task.values()} == {"bf16"}


def test_axes_and_grid_search_multiply_the_grid():
    spec = load_spec(base(inits=["xavier", "normal"], seeds=2,
                          axes={"pos_encoding": [True, False], "train_embeddings": [True, False]},
                          search={"space": {"lr": [1e-4, 3e-4, 1e-3]}}))
    plan = spec.plan()
    assert len(plan) == 2 * 4 * 3 * 2
    assert {(p.axes["pos_encoding"], p.axes["train_embeddings"]) for p in plan} == {
        (a, b) for a in (True, False) for b in (True, False)}
    cfgs = spec.expand()
    assert {c.lr for c in cfgs} == {1e-4, 3e-4, 1e-3}
    assert {c.pos_encoding for c in cfgs} == {True, False}


def test_optuna_search_counts_budget_times_seeds_per_group():
    spec = load_spec(base(inits=["xavier", "normal"], seeds=2,
                          search={"method": "optuna", "num_samples": 5,
                                  "space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}}))
    assert len(spec.plan()) == 2 * 2          # the scientific grid; points are drawn at run time
    assert spec.num_trials() == 2 * 2 * 5


@pytest.mark.parametrize("search, drawn", [
    (None, False),
    ({"method": "grid", "space": {"lr": [1e-4, 2e-4]}}, False),
    ({"method": "optuna", "num_samples": 2, "space": {"lr": {"low": 1e-4, "high": 1e-2}}}, True)])
def test_drawn_says_whether_the_search_points_are_drawn_at_run_time(search, drawn):
    """`ExperimentSpec.drawn`, and `drawn_in` of the same spec's raw data (the service's stored specs)."""
    from embinit.spec import drawn_in
    data = base(search=search) if search else base()
    spec = load_spec(data)
    assert spec.drawn is drawn and drawn_in(data) is drawn and drawn_in(spec.canonical()) is drawn
    assert "drawn" not in spec.canonical()   # a property: not a field, no change to the spec hash


def test_per_side_inits_for_translation_and_labels():
    spec = load_spec(base(inits=["xavier", {"tgt": "glove+standardize", "src": "xavier"},
                                 {"tgt": "glove", "src": "glove+shuffle"}],
                          pretrained={"glove": "/data/glove.txt"}, seeds=1))
    plan = spec.plan()
    assert [p.label for p in plan] == ["Xavier", "GloVe_Xavier", "GloVe|src:GloVe_Shuffled"]
    cfg = spec.expand()[1]
    assert (cfg.init, cfg.src_init, cfg.pretrained, cfg.src_pretrained) == (
        "glove+standardize", "xavier", "/data/glove.txt", None)
    third = spec.expand()[2]
    assert third.src_init == "glove+shuffle" and third.src_pretrained == "/data/glove.txt"


def test_structured_init_spec_with_name_and_own_path():
    spec = load_spec(base(inits=[{"source": "glove", "transform": "standardize", "name": "HighVar",
                                  "pretrained": "/x/v.txt"}], seeds=1))
    (p,) = spec.plan()
    assert p.label == "HighVar_Xavier"
    assert (p.config["init"], p.config["pretrained"]) == ("glove+standardize", "/x/v.txt")


def test_subword_source_defaults_to_its_hub_id():
    spec = load_spec(base(tasks=["sst2"], inits=["bert", "bert+standardize"], seeds=1))
    assert {c.pretrained for c in spec.expand()} == {"bert-base-uncased"}


def test_data_dir_root_gives_each_real_task_its_folder():
    spec = load_spec(base(tasks=["multi30k", "synthetic_translation", {"task": "sst2", "data_dir": "/own"}],
                          data_dir="/data", seeds=1))
    dirs = {c.task: c.data_dir for c in spec.expand()}
    assert dirs == {"multi30k": "/data/multi30k", "synthetic_translation": None, "sst2": "/own"}


def test_env_vars_expand_in_path_fields(monkeypatch):
    monkeypatch.setenv("EMB_TEST_ROOT", "/assets")
    spec = load_spec(base(inits=["glove"], pretrained={"glove": "${EMB_TEST_ROOT}/glove.6B.50d.txt"}))
    assert spec.expand()[0].pretrained == "/assets/glove.6B.50d.txt"


def test_relative_paths_are_relative_to_the_spec_file(tmp_path):
    (tmp_path / "v.txt").write_text("a 1 2\n")
    path = tmp_path / "s.yaml"
    path.write_text("name: rel\ntasks: [synthetic_translation]\ninits: [glove]\n"
                    "pretrained: {glove: ./v.txt}\nseeds: 1\n")
    assert load_spec(path).expand()[0].pretrained == str(tmp_path / "v.txt")
    assert load_spec(str(path)).expand()[0].pretrained == str(tmp_path / "v.txt")


def test_yaml_text_dict_and_spec_give_the_same_hash():
    text = "name: t\ntasks: [synthetic_translation]\ninits: [xavier]\nseeds: 2\n"
    a, b = load_spec(text), load_spec(base())
    assert a.spec_hash() == b.spec_hash() == load_spec(a).spec_hash()
    assert load_spec(base(seeds=3)).spec_hash() != a.spec_hash()
    assert isinstance(ExperimentSpec.model_validate(base()), ExperimentSpec)


def test_trial_keys_are_stable_across_loads_and_ignore_threads():
    one = [t.key() for t in load_spec(base()).expand()]
    two = [t.key() for t in load_spec(base(resources={"cpus": 2})).expand()]
    assert one == two


def test_experiment_and_tracking_defaults():
    spec = load_spec(base())
    assert spec.experiment_name() == "t" and spec.tracking_uri() == "sqlite:///mlflow.db"
    spec = load_spec(base(mlflow={"experiment": "other", "tracking_uri": "http://mlflow:5000"}))
    assert spec.experiment_name() == "other" and spec.tracking_uri("file:///x") == "file:///x"


def test_the_recorded_spec_holds_no_password_of_its_store(monkeypatch):
    """`to_yaml` is the sweep run's `spec.yaml` artifact, which anyone who reads the MLflow store sees: a
    `${VAR}` in the spec is expanded, so a password kept out of the file would land there; it is masked,
    and the recorded spec still loads."""
    monkeypatch.setenv("DB_URL", "postgresql+psycopg://mlflow:s3cret@db:5432/mlflow")
    spec = load_spec(base(mlflow={"tracking_uri": "${DB_URL}"}))
    assert spec.tracking_uri().endswith(":s3cret@db:5432/mlflow")        # what the sweep itself uses
    text = spec.to_yaml()
    assert "s3cret" not in text and "postgresql+psycopg://mlflow:***@db:5432/mlflow" in text
    assert load_spec(text).plan() == spec.plan()
    assert load_spec(base()).to_yaml() == load_spec(load_spec(base()).to_yaml()).to_yaml()


def test_the_spec_hash_does_not_hold_the_password_either(monkeypatch):
    """A sweep is known by its hash (a rerun links to the finished sweep of the same spec): a changed
    password keeps it, the recorded spec has the same one, and a URI without a password is as written."""
    monkeypatch.setenv("DB_URL", "postgresql+psycopg://mlflow:s3cret@db:5432/mlflow")
    spec = load_spec(base(mlflow={"tracking_uri": "${DB_URL}"}))
    monkeypatch.setenv("DB_URL", "postgresql+psycopg://mlflow:rotated@db:5432/mlflow")
    assert load_spec(base(mlflow={"tracking_uri": "${DB_URL}"})).spec_hash() == spec.spec_hash()
    assert load_spec(spec.to_yaml()).spec_hash() == spec.spec_hash()
    other = load_spec(base(mlflow={"tracking_uri": "postgresql+psycopg://mlflow@other:5432/mlflow"}))
    assert other.spec_hash() != spec.spec_hash()
    plain = load_spec(base(mlflow={"tracking_uri": "sqlite:///a.db"}))
    assert plain.recorded() == plain.canonical()



def test_the_recorded_spec_and_its_hash_hold_no_token_of_a_web_store(monkeypatch):
    """A bare token as an http(s) URL's userinfo (`https://TOKEN@host/`) is a password too: masked in the
    recorded spec, and a rotated token keeps the hash."""
    monkeypatch.setenv("MLFLOW_URL", "https://ghp_abcdef123456@mlflow.example.org/")
    spec = load_spec(base(mlflow={"tracking_uri": "${MLFLOW_URL}"}))
    assert "ghp_abcdef123456" not in spec.to_yaml() and "https://***@mlflow.example.org/" in spec.to_yaml()
    monkeypatch.setenv("MLFLOW_URL", "https://ghp_rotated987654@mlflow.example.org/")
    assert load_spec(base(mlflow={"tracking_uri": "${MLFLOW_URL}"})).spec_hash() == spec.spec_hash()

def test_paths_lists_every_path_field():
    spec = load_spec(base(inits=[{"tgt": "glove", "src": "xavier", "pretrained": "/g.txt"}],
                          data_dir="/d", cache_dir="/c", tasks=[{"task": "multi30k", "data_dir": "/m"}]))
    assert dict(spec.paths()) == {"data_dir": "/d", "cache_dir": "/c", "tasks[0].data_dir": "/m",
                                  "inits[0].pretrained": "/g.txt"}


# ---- every error path ----------------------------------------------------------------------------

def test_every_problem_is_collected_with_its_path():
    found = problems({"name": "bad name", "tasks": ["nope", {"task": "sst2", "epoch": 3}], "inits": [],
                      "seeds": 0, "resources": {"cpus": -1}, "colour": "red"})
    assert set(found) >= {"name", "tasks[0].task", "tasks[1].epoch", "inits", "seeds", "resources.cpus",
                          "colour"}
    assert "'nope' is not a registered task" in found["tasks[0].task"] and "multi30k" in found["tasks[0].task"]
    assert found["colour"] == f"unknown field 'colour'; valid: {TOP_FIELDS}"


def test_message_is_one_line_listing_all_problems():
    with pytest.raises(SpecError) as err:
        load_spec({"name": "x", "tasks": ["nope"], "inits": ["glvoe"]})
    text = str(err.value)
    assert "\n" not in text and "2 problems" in text and "nope" in text and "glvoe" in text


def test_structured_init_error_points_at_the_field():
    found = problems(base(inits=["xavier", "normal", {"source": "glove", "transform": "standardise"}]))
    assert "'standardise' is not a registered transform" in found["inits[2].transform"]
    assert "standardize" in found["inits[2].transform"]


def test_init_errors_by_form():
    found = problems(base(inits=["glvoe", {"tgt": "glove", "src": "xavierr"}, {"tgt": {"source": "nope"}},
                                 {"tgt": "xavier", "colour": 1}, 3]))
    assert "'glvoe' is not a registered init" in found["inits[0]"]
    assert "'xavierr'" in found["inits[1].src"]
    assert "'nope'" in found["inits[2].tgt.source"]
    assert found["inits[3].colour"] == \
        "unknown field 'colour'; valid: ['label', 'pretrained', 'src', 'src_pretrained', 'tgt']"
    assert "inits[4]" in found


TOP_FIELDS = sorted(ExperimentSpec.model_fields)


@pytest.mark.parametrize("where, value, message", [
    ("seed", 3, "unknown field 'seed'; did you mean 'seeds'?"),
    ("tasks[0].max_train_exmples", 400, "unknown field 'max_train_exmples'; did you mean 'max_train_examples'?"),
    ("defaults.lrr", 0.1, "unknown field 'lrr'; did you mean 'lr'?"),
    ("inits[0].scr", "xavier", "unknown field 'scr'; did you mean 'src'?"),
    ("resources.cpu", 1, "unknown field 'cpu'; did you mean 'cpus'?"),
    ("mlflow.experimnt", "e", "unknown field 'experimnt'; did you mean 'experiment'?"),
    ("analyses.similarity.refrence_seed", 0, "unknown field 'refrence_seed'; did you mean 'reference_seed'?"),
    # a hyperparameter, or a typo of one, at the top level: where it goes
    ("lr", 0.01, "unknown field 'lr': a hyperparameter is set per task (tasks: [{task: ..., lr: ...}]) or for "
                 "every task under defaults (defaults: {lr: ...})"),
    ("epocs", 3, "unknown field 'epocs'; did you mean the hyperparameter 'epochs'? It is set per task (tasks: "
                 "[{task: ..., epochs: ...}]) or for every task under defaults (defaults: {epochs: ...})"),
])
def test_a_misspelled_key_names_the_field_meant(where, value, message):
    """A typo in a key anywhere in the spec names the valid key closest to it (as a misspelled name of a
    registry does), else the keys valid there."""
    data = {"name": "typo", "tasks": [{"task": "sst2"}], "inits": [{"tgt": "xavier"}], "defaults": {},
            "resources": {}, "mlflow": {}, "analyses": {"similarity": {"k": 3, "reference_seed": 0}}}
    *parents, key = where.replace("[0]", ".0").split(".")
    node = data
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[key] = value
    assert problems(data)[where] == message


def test_transform_on_a_random_init_is_refused():
    assert "applies to pretrained sources" in problems(base(inits=["xavier+standardize"]))["inits[0]"]


def test_source_side_needs_a_translation_task():
    found = problems(base(tasks=["sst2"], inits=[{"tgt": "xavier", "src": "normal"}]))
    assert "only translation tasks" in found["inits[0].src"]


def test_duplicate_inits_and_tasks():
    found = problems(base(tasks=["synthetic_translation", "synthetic_translation"],
                          inits=["xavier", "normal", "xavier"]))
    assert "duplicates inits[0]" in found["inits[2]"]
    assert "listed twice" in found["tasks[1]"]


def test_same_label_twice_needs_an_explicit_label():
    spec = base(inits=["glove", {"tgt": "glove", "pretrained": "/other.txt"}], pretrained={"glove": "/g.txt"})
    assert "give it its own `label` (beside `tgt`: `{tgt: ..., label: ...}`" in problems(spec)["inits[1]"]
    spec["inits"][1]["label"] = "GloVe-other"
    assert [p.label for p in load_spec(spec).plan()][-1] == "GloVe-other"


def test_an_init_s_own_oov_rule_is_in_its_label_and_tells_two_inits_apart():
    # The rule of `{source: glove, oov: zeros}` was in the `oov` param only: its label (report, LaTeX table,
    # run name, `embinit.init` tag) read GloVe, and next to `glove` the spec refused it as a duplicate label.
    zeros = {"source": "glove", "oov": "zeros"}
    spec = load_spec(base(tasks=["sst2"], inits=["glove", zeros, "glove+match"],
                          pretrained={"glove": "/g.txt"}, seeds=1))
    plan = spec.plan()
    assert [p.label for p in plan] == ["GloVe", "GloVe oov=zeros", "Xavier_GloVe"]
    assert [p.config["oov"] for p in plan[:2]] == ["xavier", "zeros"]
    only_glove = load_spec(base(tasks=["sst2"], inits=["glove"], pretrained={"glove": "/g.txt"}, seeds=1))
    assert plan[0].key == only_glove.plan()[0].key != plan[1].key   # the label is not in the key
    two_sided = load_spec(base(inits=[{"tgt": zeros, "src": "xavier"},
                                      {"tgt": {"source": "xavier", "oov": "mean"}, "src": "glove"}],
                               pretrained={"glove": "/g.txt"}, seeds=1))
    assert [p.label for p in two_sided.plan()] == ["GloVe oov=zeros", "Xavier|src:GloVe oov=mean"]


def test_an_init_s_own_oov_rule_that_fills_no_row_is_refused():
    """`{source: glove, transform: match, oov: zeros}` and `{source: xavier, oov: mean}` were accepted, labelled
    without their rule (no row to fill) and trained as the default rule's trials: a rule written on the init
    that does nothing. Refused, saying why; a rule that fills rows of the other table is kept."""
    matched = {"source": "glove", "transform": "match", "oov": "zeros"}
    found = problems(base(tasks=["sst2"], inits=["glove", matched, {"source": "xavier", "oov": "mean"}],
                          pretrained={"glove": "/g.txt"}))
    assert found == {
        "inits[1].oov": "its own oov 'zeros' does nothing: its table has no row for an OOV rule to fill "
                        "(Xavier_GloVe: match replaces every row), so its trials are the same whatever the rule; "
                        "remove it",
        "inits[2].oov": "its own oov 'mean' does nothing: its table has no row for an OOV rule to fill "
                        "(Xavier: a random init draws every row), so its trials are the same whatever the rule; "
                        "remove it"}
    two_sided = problems(base(inits=[{"tgt": {"source": "xavier", "oov": "mean"}, "src": "glove+match"}],
                              pretrained={"glove": "/g.txt"}))
    assert list(two_sided) == ["inits[0].tgt.oov"]
    assert "its tables have no row" in two_sided["inits[0].tgt.oov"]
    assert "a random init draws every row and match replaces every row" in two_sided["inits[0].tgt.oov"]
    load_spec(base(inits=[{"tgt": {"source": "xavier", "oov": "mean"}, "src": "glove"}],   # fills GloVe's rows
                   pretrained={"glove": "/g.txt"}))
    # the default rule written out names nothing the trials do not do: accepted, as before that check
    same = load_spec(base(tasks=["sst2"], inits=[{"source": "xavier", "oov": "xavier"}, "glove+match"],
                          pretrained={"glove": "/g.txt"}))
    assert [t.key() for t in same.expand()] == [t.key() for t in load_spec(base(
        tasks=["sst2"], inits=["xavier", "glove+match"], pretrained={"glove": "/g.txt"})).expand()]
    load_spec(base(inits=[{"tgt": "glove", "src": {"source": "xavier", "oov": "xavier"}}],
                   pretrained={"glove": "/g.txt"}))


def test_a_source_side_oov_rule_that_fills_no_row_is_refused_as_doing_nothing():
    """`{tgt: glove, src: {source: xavier, oov: zeros}}` was refused with "give it on the target side", which
    would change the GloVe table; the rule does nothing on a Xavier (or matched) source table, so the problem
    says that. A source rule that fills rows keeps its advice (one rule per trial, on the target side)."""
    for src, why in (({"source": "xavier", "oov": "zeros"}, "Xavier: a random init draws every row"),
                     ({"source": "glove", "transform": "match", "oov": "zeros"},
                      "Xavier_GloVe: match replaces every row")):
        found = problems(base(inits=[{"tgt": "glove", "src": src}], pretrained={"glove": "/g.txt"}))
        assert found == {"inits[0].src.oov": f"oov 'zeros' on the source side does nothing: its table has no row "
                                             f"for an OOV rule to fill ({why}); remove it"}
    found = problems(base(inits=[{"tgt": "xavier", "src": {"source": "glove", "oov": "zeros"}}],
                          pretrained={"glove": "/g.txt"}))
    assert found["inits[0].src.oov"].startswith("oov 'zeros' on the source side: a trial has one OOV rule, for "
                                                "both tables; give it on the target side")


def test_an_init_s_own_oov_rule_may_not_be_replaced_by_the_spec_s():
    # the spec's `oov` (an axis, a default, a task's, a search) wins over the init's own in every trial, which
    # trained `glove` under a label naming another rule
    own = {"source": "glove", "oov": "zeros"}
    for where, over in (("axes.oov", {"axes": {"oov": ["xavier", "mean"]}}),
                        ("defaults.oov", {"defaults": {"oov": "mean"}}),
                        ("tasks[0].oov", {"tasks": [{"task": "sst2", "oov": "mean"}]})):
        found = problems({**base(tasks=["sst2"], inits=["xavier", own], pretrained={"glove": "/g.txt"}), **over})
        assert found == {"inits[1]": f"its own oov 'zeros' is replaced by the rule {where} sets (for every init), so "
                                     f"its trials would not use it: drop one of the two"}


@pytest.mark.parametrize("where", ["axes", "search"])
def test_an_oov_axis_does_not_apply_to_inits_without_rows_for_a_rule(where):
    # Xavier and Xavier_GloVe (match replaces every row) were trained once per rule under other keys, and
    # reported in rows identical to oov=xavier's (which counted in the Holm correction's m); with `oov` in a
    # grid search's space, once per rule under one key: the same trial twice in one plan
    varied = {"oov": ["xavier", "zeros"], "dropout": [0.1, 0.3]}
    spec = load_spec(base(tasks=["sst2"], inits=["xavier", "glove+match", "glove"], pretrained={"glove": "/g.txt"},
                          seeds=2, **({"axes": varied} if where == "axes" else
                                      {"search": {"method": "grid", "space": varied}})))
    plan = spec.plan()
    values = (lambda p: p.axes) if where == "axes" else (lambda p: p.point)
    per_init = {label: [p for p in plan if p.label == label] for label in ("Xavier", "Xavier_GloVe", "GloVe")}
    assert [len(ts) for ts in per_init.values()] == [2 * 2, 2 * 2, 2 * 2 * 2] and spec.num_trials() == len(plan)
    assert all(values(p).keys() == {"dropout"} and p.config["oov"] == "xavier" for p in per_init["Xavier"])
    assert {values(p)["oov"] for p in per_init["GloVe"]} == {"xavier", "zeros"}
    assert len({p.key for p in plan}) == len(plan)
    lines = dry_run.trial_lines(spec, plan)
    place = "axis oov" if where == "axes" else "search.space.oov"
    assert f"{place} does not apply to sst2 x Xavier, sst2 x Xavier_GloVe: no table of theirs has rows" in lines[-1]
    assert not [line for line in dry_run.trial_lines(load_spec(base()), load_spec(base()).plan()) if "apply" in line]


def test_oov_is_keyed_at_its_default_where_no_table_has_rows_for_it(version_of_the_pins):
    # keys computed by the code before (cd020bc, CODE_VERSION 2): where a rule fills rows they are the same,
    # where none does (a random init, match) every rule now has oov=xavier's key
    keys = {("sst2", "xavier", "xavier"): "1b37c5fb73a4b759", ("sst2", "glove", "xavier"): "404d3a67e24b44e9",
            ("sst2", "glove", "zeros"): "0cb97032cfa8030b", ("sst2", "glove+match", "xavier"): "a8e5302d5549699e"}
    for (task, init, oov), key in keys.items():
        assert TrialConfig(task=task, init=init, pretrained="/g.txt" if "glove" in init else None, oov=oov).key() == key
    assert TrialConfig(task="sst2", init="xavier", oov="zeros").key() == keys[("sst2", "xavier", "xavier")]
    assert TrialConfig(task="sst2", init="glove+match", pretrained="/g.txt", oov="mean").key() == \
        keys[("sst2", "glove+match", "xavier")]
    # a translation trial's source table counts too: a GloVe source has rows for the rule
    two_sided = TrialConfig(task="synthetic_translation", init="xavier", src_init="glove", src_pretrained="/g.txt",
                            oov="zeros")
    assert two_sided.oov_applies() and two_sided.key() == "de1c6da21f57029b"
    matched = {oov: TrialConfig(task="synthetic_translation", init="glove+match", src_init="xavier",
                                pretrained="/g.txt", oov=oov) for oov in ("zeros", "xavier")}
    assert not matched["zeros"].oov_applies() and matched["zeros"].key() == matched["xavier"].key()


def test_pretrained_file_source_without_a_path():
    found = problems(base(inits=["glove+standardize"]))
    assert "'glove' needs a pretrained file" in found["inits[0]"]


def test_seed_problems():
    assert "must be >= 1" in problems(base(seeds=0))["seeds"]
    assert "distinct" in problems(base(seeds=[1, 1]))["seeds"]
    assert "seeds[0]" in problems(base(seeds=["a"]))


def test_a_repeated_seed_is_named_beside_an_invalid_one():
    """`seeds: [1, 1, a]` named only the `a`; the repeat came a round later."""
    found = problems(base(seeds=[1, 1, "a"]))
    assert "got 'a'" in found["seeds[2]"]
    assert "1 is given more than once" in found["seeds"]
    assert "given more than once" not in str(problems(base(seeds=[1, 2, "a"])))


def test_an_invalid_emb_seed_value_beside_a_reference_emb_seed_is_a_spec_error():
    """The planned embedding seeds were sorted with the invalid value among them: a raw TypeError."""
    sim = {"similarity": {"reference_emb_seed": 7}}
    found = problems(base(analyses=sim, axes={"emb_seed": ["abc"]}))
    assert list(found) == ["axes.emb_seed[0]"]
    found = problems(base(analyses=sim, search={"space": {"emb_seed": ["abc", 3]}}))
    assert list(found) == ["search.space.emb_seed[0]"]
    assert list(problems(base(analyses=sim, axes={"emb_seed": [3]}))) == ["analyses.similarity.reference_emb_seed"]
    # `null` is a valid emb_seed (the trial's own seed): it was sorted among the ints, a TypeError
    found = problems(base(analyses=sim, axes={"emb_seed": [None, 3]}))
    assert "[0, 1, 3]" in found["analyses.similarity.reference_emb_seed"]


def test_axis_problems():
    found = problems(base(axes={"pos_encoding": ["maybe"], "colour": [1], "epochs": []}))
    assert "valid boolean" in found["axes.pos_encoding[0]"]
    assert "'colour' is not a hyperparameter" in found["axes.colour"]
    assert "at least one value" in found["axes.epochs"]


def test_axis_and_search_values_reach_the_trial_in_their_field_type():
    """An axis value was passed on as written: `train_embeddings: ["false"]` trained the embeddings (a
    non-empty string is true) and `lr: ["1e-3"]` reached the optimizer as a string; a fixed value is coerced."""
    spec = load_spec(base(axes={"train_embeddings": ["false", True], "lr": ["1e-3"]},
                          search={"space": {"dropout": ["0.1", 0.2]}}))
    got = {(c.train_embeddings, c.lr, c.dropout) for c in spec.expand()}
    assert got == {(False, 0.001, 0.1), (True, 0.001, 0.1), (False, 0.001, 0.2), (True, 0.001, 0.2)}
    assert all(type(c.lr) is float and type(c.train_embeddings) is bool for c in spec.expand())
    assert spec.axes["lr"] == [0.001] and spec.search.space["dropout"] == [0.1, 0.2]


def test_search_problems():
    found = problems(base(axes={"lr": [1e-3]}, search={"space": {"lr": [1e-4], "dropout": {"low": 0.1, "high": 0.3},
                                                                  "batch_size": ["big"]}}))
    assert "grid search needs a list" in found["search.space"]
    found = problems(base(search={"space": {"lr": [1e-4], "batch_size": ["big"]}}))
    assert "valid integer" in found["search.space.batch_size[0]"]
    assert "search.mode" in problems(base(search={"space": {"lr": [1e-4]}, "mode": "up"}))
    found = problems(base(search={"method": "optuna", "space": {"lr": {"low": 1, "high": 0}}}))
    assert "low < high" in found["search.space.lr"]
    assert "trial budget" in found["search.num_samples"]
    found = problems(base(search={"space": {"pos_encoding": [True]}}, axes={"pos_encoding": [False]}))
    assert "both an ablation axis and searched" in found["search.space.pos_encoding"]
    assert "log range needs low > 0" in problems(base(search={
        "method": "optuna", "num_samples": 2, "space": {"lr": {"low": 0, "high": 1, "log": True}}}))["search.space.lr"]
    assert "search.space" in problems(base(search={"space": {}}))


def test_one_value_where_a_search_space_wants_a_list_is_one_problem_naming_the_forms():
    """`lr: 1e-3` gave two problems at one path, the second naming an internal class ('a valid dictionary or
    instance of Range')."""
    assert problems(base(search={"space": {"lr": 1e-3}})) == {"search.space": (
        "lr: one value (0.001), not a list: a grid takes a list of values (lr: [0.001]), optuna a list or a range "
        "(lr: {low: ..., high: ...})")}


def test_a_value_given_twice_in_an_axis_or_grid_is_refused():
    """`lr: [2e-3, 2e-3]` planned each trial twice under one key: the sweep trained it once and ended
    '2/4 trials finished, 0 failed'; duplicate seeds and inits are refused, so these are too (as typed)."""
    found = problems(base(axes={"pos_encoding": [True, "true"]}, search={"space": {"lr": [2e-3, 1e-3, "2e-3"]}}))
    assert found["axes.pos_encoding[1]"] == "repeats axes.pos_encoding[0] (True); remove it: it plans the same " \
                                            "trials again"
    assert found["search.space.lr[2]"] == "repeats search.space.lr[0] (0.002); remove it: it plans the same " \
                                          "trials again"
    assert len(found) == 2


def test_a_search_selects_by_a_metric_the_trainer_tracks_in_its_direction():
    """A translation trial tracks the best val/loss only: `val/bleu` (or any test/ metric) has no best
    value, so every grid point would tie and the report would pick whichever ran first."""
    space = {"space": {"lr": [1e-4, 2e-4]}}
    found = problems(base(search={**space, "metric": "val/bleu", "mode": "max"}))
    assert found["search.metric"] == ("'val/bleu' is not a metric the trainer tracks, so no search point would "
                                      "have a best value to compare: tasks[0] (synthetic_translation) tracks "
                                      "['val/loss']")   # no "did you mean 'val/loss'": BLEU was meant
    found = problems(base(tasks=["sst2", "mnli"], search={**space, "metric": "test/acc"}))
    assert "tasks[0] (sst2) tracks ['val/acc', 'val/loss']" in found["search.metric"]
    assert ("; tasks[1] (mnli) tracks ['val/acc_matched', 'val/acc_mismatched', 'val/loss_matched', "
            "'val/loss_mismatched']") in found["search.metric"]
    # a classifier tracks its loss too (issue: classification rows had no best val loss): a search may use it
    assert load_spec(base(tasks=["sst2"], search={**space, "metric": "val/loss", "mode": "min"})).search.metric \
        == "val/loss"
    assert "val/loss is better when lower (mode: min), got mode: max" in problems(
        base(search={**space, "metric": "val/loss", "mode": "max"}))["search.mode"]
    mnli = load_spec(base(tasks=["mnli"], search={**space, "metric": "val/acc_mismatched", "mode": "max"}))
    assert mnli.search.metric == "val/acc_mismatched"


def test_hyperparameter_range_problems():
    found = problems(base(tasks=[{"task": "sst2", "epochs": 0, "dropout": 1.5, "precision": "fp8"}]))
    assert {"tasks[0].epochs", "tasks[0].dropout", "tasks[0].precision"} <= set(found)


def test_unset_env_var_is_a_clear_problem(monkeypatch):
    monkeypatch.delenv("EMB_NOT_SET", raising=False)
    found = problems(base(inits=["glove"], pretrained={"glove": "${EMB_NOT_SET}/g.txt"}))
    assert "environment variable EMB_NOT_SET is not set" in found["pretrained.glove"]


def test_input_form_errors(tmp_path):
    assert "not valid YAML" in str(pytest.raises(SpecError, load_spec, "name: [unclosed\n").value)
    twice = "name: t\ntasks: [sst2]\ninits: [xavier]\nseeds: 1\nseeds: 3\n"
    twice = str(pytest.raises(SpecError, load_spec, twice).value)
    assert "line 5, column 1: 'seeds' is given twice (first at line 4)" in twice   # not: the last one wins
    assert "mapping at the top level" in str(pytest.raises(SpecError, load_spec, "- a\n- b\n").value)
    assert "cannot read spec file" in str(pytest.raises(SpecError, load_spec, str(tmp_path / "no.yaml")).value)
    assert "must be a mapping" in str(pytest.raises(SpecError, load_spec, 42).value)
    (tmp_path / "empty.yaml").write_text("# to be written\n")   # said "got NoneType"
    assert str(pytest.raises(SpecError, load_spec, tmp_path / "empty.yaml").value) == (
        f"invalid experiment spec (1 problem): the spec in '{tmp_path / 'empty.yaml'}' is empty: a spec is a mapping "
        f"with at least name, tasks and inits (e.g. tune_configs/quickstart.yaml)")


def test_a_spec_file_is_read_whatever_its_name_and_broken_files_say_what_is_wrong(tmp_path):
    """A path not ending in lower-case .yaml was parsed as YAML text ("got str"); a non-UTF-8 file, a
    value containing itself and aliases nested into billions of values raised or hung."""
    text = "name: t\ntasks: [sst2]\ninits: [xavier]\n"
    for name in ("Base.YAML", "spec.txt"):
        (tmp_path / name).write_text(text)
        assert load_spec(str(tmp_path / name)).name == "t"
    for missing in ("myspec", "-"):
        with pytest.raises(SpecError, match=f"cannot read spec file '{missing}': No such file or directory"):
            load_spec(missing)
    (tmp_path / "latin1.yaml").write_bytes(b"name: caf\xe9\n")
    # the line, the byte and the fix (it said "byte 0xe9 at position 9" alone)
    with pytest.raises(SpecError, match=r"not UTF-8 text: .*latin1.yaml:1: not UTF-8: byte 0xe9 at column 10 .*iconv"):
        load_spec(tmp_path / "latin1.yaml")
    with pytest.raises(SpecError, match=r"a value contains itself \(a YAML alias inside its own anchor"):
        load_spec(text + "x: &a [1, *a]\n")
    bomb = "a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    with pytest.raises(SpecError, match="expands to more than 1,000,000 values"):
        load_spec(text + bomb)
    # aliases a spec uses to share settings are fine
    shared = load_spec(text.replace("tasks: [sst2]", "tasks: [{task: sst2, lr: &lr 0.001}]") + "defaults: {lr: *lr}\n")
    assert shared.defaults.lr == 0.001


def test_heads_that_do_not_divide_a_d_model_the_spec_sets_name_the_heads_to_choose(tmp_path):
    """With d_model set (D=50 for GloVe 6B 50d, the offline specs), the fix is the heads: the divisors of
    that D, not "set `d_model`", which is already set; with D the task default, setting d_model is a fix too."""
    from embinit.spec import load_spec
    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\ntasks:\n  - task: synthetic_translation\n    heads: 8\n    d_model: 50\n"
                    "inits: [xavier]\nseeds: 1\n")
    with pytest.raises(EmbinitError) as e:
        load_spec(spec)
    assert "heads=8 does not divide d_model=50" in str(e.value)
    assert "choose heads from [1, 2, 5, 10, 25, 50]" in str(e.value) and "set `d_model`" not in str(e.value)
    spec.write_text("name: s\ntasks:\n  - task: synthetic_translation\n    heads: 5\ninits: [xavier]\nseeds: 1\n")
    with pytest.raises(EmbinitError, match=r"choose heads from \[1, 2, 4, 8, 16, 32\], or set `d_model` on the task"):
        load_spec(spec)


def test_entries_that_compute_the_same_trials_are_refused():
    spec = base(inits=["glove", {"tgt": {"source": "glove", "name": "Other"}}], pretrained={"glove": "/g.txt"})
    assert "trains the same trials" in problems(spec)["inits[1]"]


def test_explicit_heads_must_divide_the_xavier_rows_d_model(tmp_path):
    """An all-Xavier init takes D from d_model or the task default (no file to take it from): heads set on
    the task must divide it, caught when the spec loads instead of failing every such trial at start."""
    from embinit.spec import load_spec
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntasks:\n  - task: synthetic_translation\n    heads: 5\ninits: [xavier]\nseeds: 1\n")
    with pytest.raises(EmbinitError, match=r"tasks\[0\]\.heads: heads=5 does not divide d_model=32"):
        load_spec(bad)
    ok = tmp_path / "ok.yaml"
    ok.write_text("name: ok\ntasks:\n  - task: synthetic_translation\n    heads: 5\n    d_model: 40\n"
                  "inits: [xavier]\nseeds: 1\n")
    assert load_spec(ok).num_trials() == 1


def test_an_unknown_oov_rule_and_a_pretrained_path_no_init_reads_are_refused():
    found = problems({"name": "x", "tasks": [{"task": "sst2", "oov": "meen"}], "inits": ["xavier"],
                      "defaults": {"oov": "zero"}})
    assert "'meen' is not a registered oov rule" in found["tasks[0].oov"]
    assert "did you mean 'zeros'?" in found["defaults.oov"]
    found = problems({"name": "x", "tasks": ["multi30k"],
                      "inits": [{"tgt": "xavier", "pretrained": "/g.txt"},
                                {"tgt": "glove", "pretrained": "/g.txt", "src_pretrained": "/h.txt"}]})
    assert "'/g.txt' is set but the init 'xavier' draws from no pretrained source" in found["inits[0].pretrained"]
    assert "there is no `src` init" in found["inits[1].src_pretrained"]


def test_a_source_sides_own_oov_rule_is_refused_not_ignored():
    """A trial has one `oov`, for both tables, taken from the target side: a source side's other rule was
    silently dropped (its trials filled the German table's rows by the target's rule)."""
    spec = base(tasks=["multi30k"], pretrained={"glove": "/g.txt"})
    bad = {**spec, "inits": [{"tgt": {"source": "glove"}, "src": {"source": "glove", "oov": "zeros"}}]}
    with pytest.raises(SpecError) as e:
        load_spec(bad)
    assert e.value.problems[0][0] == "inits[0].src.oov" and "one OOV rule" in e.value.problems[0][1]
    same = {**spec, "inits": [{"tgt": {"source": "glove", "oov": "zeros"}, "src": {"source": "glove", "oov": "zeros"}}]}
    assert {p.config["oov"] for p in load_spec(same).plan()} == {"zeros"}


def test_a_duplicate_on_some_tasks_only_says_on_which():
    # `glove` puts GloVe on both tables of a translation task, `{tgt: glove, src: xavier}` on the target
    # only: they train apart on multi30k and alike on sst2 (one table); "it trains the same trials" misled
    spec = base(tasks=["synthetic_translation", "synthetic_classification"],
                inits=["glove", {"tgt": "glove", "src": "xavier"}], pretrained={"glove": "/g.txt"})
    assert problems(spec)["inits[1]"] == ("duplicates inits[0] (label 'GloVe'); remove it: it trains the same "
                                          "trials on synthetic_classification (not on the other tasks)")
    spec = base(inits=["xavier", "normal", "xavier"])   # the same trials on every task: said as before
    assert problems(spec)["inits[2]"] == "duplicates inits[0] (label 'Xavier'); remove it: it trains the same trials"


def test_subword_mean_on_a_source_without_a_tokenizer_is_a_spec_problem(tmp_path):
    """`oov: subword_mean` (an axis value, a task's rule) over a GloVe init passed the spec's check and every
    such trial failed when it built its table ("oov rule 'subword_mean' needs a source with a tokenizer");
    the check now names each init it would fail for. A sub-word source (`hf`, or `pretrained` naming a
    model folder) and a `match`ed table, which has no row for the rule, are left alone."""
    from embinit.init import testing as tt
    vectors = tt.write_text(tmp_path / "g.txt", tt.word_vectors(dim=8))
    binary = tt.write_word2vec_bin(tmp_path / "w.bin", tt.word_vectors(dim=8))
    bert = tt.write_tiny_bert(tmp_path / "bert")
    found = problems(base(tasks=["sst2"], inits=["glove", {"source": "hf", "name": "B"}, "glove+match"],
                          pretrained={"glove": str(vectors), "hf": str(bert)}, axes={"oov": ["mean", "subword_mean"]}))
    assert found == {"axes.oov": (
        f"oov 'subword_mean' needs a source with a tokenizer (bert, mbert, t5, mt5, hf), but GloVe (sst2) reads "
        f"'glove' from {vectors}, a word-vector file without one, so its trials would fail: use another rule for "
        "it (mean, mean_cov, focus, zeros, xavier)")}
    # a translation init's source side is read with the same rule; a generic `pretrained` is told by its file
    found = problems(base(tasks=[{"task": "synthetic_translation", "oov": "subword_mean"}],
                          inits=[{"tgt": "pretrained", "src": "glove+standardize"}],
                          pretrained={"glove": str(vectors), "pretrained": str(bert)}))
    assert list(found) == ["inits[0]"] and "reads 'glove+standardize' from" in found["inits[0]"]
    found = problems(base(tasks=[{"task": "sst2", "oov": "subword_mean"}], inits=["pretrained"],
                          pretrained={"pretrained": str(binary)}))
    assert list(found) == ["inits[0]"] and f"from {binary}, a word-vector file" in found["inits[0]"]
    load_spec(base(tasks=[{"task": "sst2", "oov": "subword_mean"}], inits=["pretrained", "glove+match", "xavier"],
                   pretrained={"glove": str(vectors), "pretrained": str(bert)}))
