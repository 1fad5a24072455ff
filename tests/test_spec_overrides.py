"""`embinit run SPEC key=value ...` (issue 22 item 10): shrink a study from the command line, validated
like the spec, errors naming the override; `--dry-run` shows epochs, model size and cost."""

from __future__ import annotations

from pathlib import Path

import pytest

from embinit.cli import main
from embinit.spec import SpecError, load_spec

ROOT = Path(__file__).resolve().parents[1]
QUICK = ROOT / "tune_configs" / "quickstart.yaml"


def test_overrides_shrink_the_study():
    full = load_spec(QUICK)
    small = load_spec(QUICK, ["epochs=2", "seeds=2", "inits=pretrained_xavier,xavier"])
    # the task entry fixes epochs: 20; the override wins there too, for every trial
    assert {c.epochs for c in small.expand()} == {2} and {c.epochs for c in full.expand()} == {20}
    assert small.seeds == [0, 1] and small.num_trials() == 4
    # the spec's own entries, by label, in the order asked (the structured init keeps its source/src side)
    assert [p.label for p in small.plan()] == ["Pretrained_Xavier"] * 2 + ["Xavier"] * 2
    assert small.inits[0] == full.inits[2]
    assert not {p.key for p in small.plan()} & {p.key for p in full.plan()}
    # a shrunk study never mixes into the real one's MLflow experiment, unless asked to
    assert small.experiment_name() == "quickstart-epochs2-seeds2-initspretrained_xavier_xavier"
    assert load_spec(QUICK, ["epochs=2", "mlflow.experiment=try"]).experiment_name() == "try"
    assert load_spec(QUICK, ["lr=0.01", "pos_encoding=false"]).expand()[0].pos_encoding is False


def test_an_init_named_as_written_in_the_spec_keeps_the_spec_s_entry(tmp_path):
    """`inits=glove+standardize` with the spec's `{tgt: glove+standardize, src: xavier}` added a bare init
    of the same label instead: English GloVe on the German source table, under the label GloVe_Xavier."""
    path = tmp_path / "s.yaml"
    path.write_text("name: t\ntasks: [multi30k]\npretrained: {glove: /g.txt}\nseeds: 1\ninits:\n  - xavier\n"
                    "  - {tgt: glove, src: xavier}\n  - {tgt: glove+standardize, src: xavier}\n")
    full = {p.label: p for p in load_spec(path).plan()}
    for names in ("glove+standardize", "glove_xavier", "GloVe_Xavier", "xavier,glove+standardize,glove"):
        small = load_spec(path, [f"inits={names}"])
        assert small.num_trials() == len(names.split(",")), names
        for p in small.plan():   # the spec's entries: the source side stays Xavier, the key is the spec's
            assert p.config["src_init"] == "xavier" or p.label == "Xavier", (names, p.config)
            assert p.key == full[p.label].key, names
    assert load_spec(path, ["inits=glove+shuffle"]).plan()[0].config["src_init"] is None   # not in the spec


def test_an_init_is_selected_by_its_exact_label_else_by_its_init_string(tmp_path):
    """`inits=glove` also kept `{source: glove, oov: zeros}` (labelled `GloVe oov=zeros`) and an entry the
    spec labels `mine` whose init is GloVe, and `inits=GloVe oov=zeros` named no entry (then failed as an
    init spec): a label selects exactly the entry of that label; an init string, with no entry of that
    label, the entries whose target side is that init."""
    path = tmp_path / "s.yaml"
    path.write_text("name: t\ntasks: [sst2]\npretrained: {glove: /g.txt}\nseeds: 1\ninits:\n  - xavier\n"
                    "  - glove\n  - {source: glove, oov: zeros}\n  - {tgt: {source: glove, oov: mean}, label: mine}\n")
    full = {p.label: p.key for p in load_spec(path).plan()}
    for names, labels in (("glove", ["GloVe"]), ("GloVe oov=zeros", ["GloVe oov=zeros"]), ("MINE", ["mine"]),
                          ("mine,glove", ["mine", "GloVe"])):
        plan = load_spec(path, [f"inits={names}"]).plan()
        assert [p.label for p in plan] == labels, names
        assert all(p.key == full[p.label] for p in plan), names
    path.write_text("name: t\ntasks: [sst2]\npretrained: {glove: /g.txt}\nseeds: 1\ninits:\n  - xavier\n"
                    "  - {source: glove, oov: zeros}\n  - {source: glove, oov: mean}\n")
    assert [p.label for p in load_spec(path, ["inits=glove"]).plan()] == ["GloVe oov=zeros", "GloVe oov=mean"]


def test_bad_overrides_are_named_with_every_problem():
    with pytest.raises(SpecError) as e:
        load_spec(QUICK, ["epoch=2", "lr"])
    assert sorted(p for p, _ in e.value.problems) == ["override epoch", "override lr"]
    assert "'epoch' is neither a spec field nor a hyperparameter" in str(e.value) and "'epochs'" in str(e.value)
    with pytest.raises(SpecError) as e:
        load_spec(QUICK, ["epochs=-1", "seeds=0"])
    text = str(e.value)
    assert "got -1 (from the command-line override epochs=-1)" in text
    assert "seeds: a seed count must be >= 1, got 0 (from the command-line override seeds=0)" in text
    with pytest.raises(SpecError, match=r"inits\[0\]: 'glvoe' is not a registered init"):
        load_spec(QUICK, ["inits=glvoe"])
    with pytest.raises(SpecError) as e:     # not "the last one wins" silently
        load_spec(QUICK, ["epochs=1", "epochs=3"])
    assert "epochs is overridden twice (epochs=1, then 'epochs=3'); give it once" in str(e.value)


def test_an_empty_override_or_a_default_a_task_shadows_is_a_problem_not_a_silent_no_op():
    """`epochs=` fell back to the task default under an experiment named `...-epochsNone`, and
    `defaults.epochs=3` did nothing where the task entry sets epochs (the quickstart's sets 20)."""
    with pytest.raises(SpecError) as e:
        load_spec(QUICK, ["epochs=", "defaults.lr=0.01", "seeds=2"])
    found = dict(e.value.problems)
    assert found["override epochs"] == "epochs= has no value; give one (epochs=VALUE), or null to unset it"
    assert found["override defaults.lr"] == ("defaults.lr would not reach every task: tasks[0] "
                                            "(synthetic_translation) sets lr: 0.003; override lr=0.01 to set it "
                                            "for every task")
    with pytest.raises(SpecError, match=r"epochs is overridden twice \(defaults.epochs=3, then epochs=2\)"):
        load_spec(QUICK, ["defaults.epochs=3", "epochs=2"])
    # a default no task entry fixes reaches every task
    assert {c.dropout for c in load_spec(QUICK, ["defaults.dropout=0.2"]).expand()} == {0.2}


def test_one_bad_override_is_one_problem_and_whole_entries_replace_the_list():
    # it sets defaults.epochs and the task's epochs: said once, at the key it wrote, not at `defaults.epochs`,
    # which the quickstart has not written
    for spec in (QUICK, {"name": "s", "tasks": ["synthetic_translation"], "inits": ["xavier"]}):
        with pytest.raises(SpecError) as e:
            load_spec(spec, ["epochs=abc"])
        assert e.value.problems == [("epochs", "Input should be a valid integer, unable to parse string as an "
                                                "integer, got 'abc' (from the command-line override epochs=abc)")]
    with pytest.raises(SpecError) as e:   # the override that set a field the others do not spread is named
        load_spec(QUICK, ["retries=-1"])
    assert e.value.problems == [("retries", "Input should be greater than or equal to 0, got -1 "
                                            "(from the command-line override retries=-1)")]
    # task entries written out replace the spec's (they were read as names: "{'task': ...} is not a task")
    spec = load_spec(QUICK, ["tasks=[{task: synthetic_translation, epochs: 4}]"])
    assert {c.epochs for c in spec.expand()} == {4}


def test_a_key_given_twice_inside_an_override_value_is_a_problem_like_in_a_spec_file():
    # read with the spec file's loader: yaml.safe_load kept the last lr and searched lr 2 alone
    with pytest.raises(SpecError) as e:
        load_spec(QUICK, ["search={method: grid, params: {lr: [1e-3], lr: [2e-3]}}", "epoch=2"])
    assert sorted(p for p, _ in e.value.problems) == ["override epoch", "override search"]
    assert "'lr' is given twice" in str(e.value)
    with pytest.raises(SpecError, match="override name: .*could not determine a constructor"):
        load_spec(QUICK, ["name=!!python/object/apply:os.getcwd []"])   # the safe loader's refusal, said
    # text that is not YAML stays the text as written
    assert load_spec(QUICK, ["description=a: b: c"]).description == "a: b: c"


def test_seed_lists_and_empty_names_say_what_is_accepted():
    # a comma list works for seeds as for inits and tasks
    assert load_spec(QUICK, ["seeds=0,3"]).seeds == [0, 3]
    assert load_spec(QUICK, ["seeds=[0,3]"]).seeds == [0, 3]
    for bad, shown in (("seeds=1.5", "1.5"), ("seeds=true", "True")):
        with pytest.raises(SpecError) as e:
            load_spec(QUICK, [bad])
        assert f"seeds: expected a seed count >= 1 or a list of distinct seeds (seeds: 3, seeds: [0, 3]), got {shown}" \
            in str(e.value)
    with pytest.raises(SpecError) as e:
        load_spec(QUICK, ["name=", "mlflow.experiment="])
    found = dict(e.value.problems)
    assert "name must not be empty" in found["override name"]
    assert "mlflow.experiment must not be empty" in found["override mlflow.experiment"]   # was silently ignored
    with pytest.raises(SpecError, match="name: must not be empty"):
        load_spec({"name": "", "tasks": ["sst2"], "inits": ["xavier"]})


def test_cli_overrides_and_dry_run_cost(capsys):
    assert main(["run", str(QUICK), "--dry-run", "epochs=3", "seeds=2"]) == 0   # after an option too
    out = capsys.readouterr().out
    assert "6 trials; MLflow experiment 'quickstart-epochs3-seeds2'" in out
    row = next(ln for ln in out.splitlines() if ln.strip().startswith("6 ") and "synthetic_translation" in ln)
    assert row.split()[:2] == ["6", "3"] and "parameters + " in row and "per tgt-vocabulary row" in row
    assert "total: 18 trial-epochs" in out
    assert main(["run", str(QUICK), "--dry-run", "epochs=0"]) == 2
    assert "(from the command-line override epochs=0)" in capsys.readouterr().err


def test_model_size_counts_what_the_model_has():
    import torch

    from embinit.models import ModelConfig, build_model
    from embinit.models.size import model_size
    cfg = ModelConfig(d_model=16, heads=4, layers=2, ff_dim=24)
    size = model_size("translation", cfg)
    model = build_model("translation", {"src": torch.zeros(11, 16), "tgt": torch.zeros(13, 16)}, cfg)
    assert size.total({"src": 11, "tgt": 13}) == sum(p.numel() for p in model.parameters())
    assert size.per_row == {"src": 16, "tgt": 16 + 17}    # the target row's embedding and output (+ bias)


@pytest.mark.slow   # an MLflow store
def test_dry_run_estimates_from_trials_of_the_same_shape_in_the_store(tmp_path, monkeypatch, capsys):
    from embinit.tracking import mlflow_store, trial_run
    monkeypatch.chdir(tmp_path)                       # the quickstart's store is ./mlflow.db
    assert main(["run", str(QUICK), "--dry-run", "epochs=2"]) == 0
    assert "s/epoch '?'" in capsys.readouterr().out and not (tmp_path / "mlflow.db").exists()  # creates nothing
    uri = "sqlite:///mlflow.db"
    exp = mlflow_store.ensure_experiment("earlier", uri)
    cfg = load_spec(QUICK, ["epochs=4"]).expand()[0].to_dict()    # same shape, another schedule
    run = trial_run.TrialRun.open(uri, exp, None, cfg, "k", "Xavier", {"axes": {}, "point": {}})
    run.finish({"status": "finished", "history": [], "test": {}, "best": {}, "best_epoch": 4, "wall_time_s": 80.0}, [])
    assert main(["run", str(QUICK), "--dry-run", "epochs=2"]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.strip().startswith("9 "))
    assert row.split()[:6] == ["9", "2", "synthetic_translation", "32", "1", "20"]   # 80 s / 4 epochs
    assert "6.0 trial-minutes" in out                                               # 9 x 2 epochs x 20 s
    # a quarter of the batch is four times the steps per epoch: the estimate grows (it was the same 20 s)
    default_batch = load_spec(QUICK).expand()[0].resolved().batch_size
    assert main(["run", str(QUICK), "--dry-run", "epochs=2", f"batch_size={default_batch // 4}"]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.strip().startswith("9 "))
    assert row.split()[5] == "~80" and "scaled by the number of steps per epoch" in out
    assert "24.0 trial-minutes" in out                                              # 9 x 2 epochs x 80 s
    # a trial the spec's experiment has finished is reused: marked, and left out of the cost
    spec = load_spec(QUICK, ["epochs=2"])
    first = spec.plan()[0]
    done = trial_run.TrialRun.open(uri, mlflow_store.ensure_experiment(spec.experiment_name(), uri), None,
                                   first.config, first.key, first.label, {"axes": {}, "point": {}})
    done.finish({"status": "finished", "history": [], "test": {}, "best": {}, "best_epoch": 2,
                 "wall_time_s": 40.0}, [])
    assert main(["run", str(QUICK), "--dry-run", "epochs=2"]) == 0
    out = capsys.readouterr().out
    assert f"{first.key}  " in out and out.count("[finished: reused]") == 1
    assert "1 of the 9 trials already finished in experiment 'quickstart-epochs2' of this store" in out
    row = next(ln for ln in out.splitlines() if ln.strip().startswith("8 ") and "parameters" in ln)
    assert row.split()[:3] == ["8", "2", "synthetic_translation"] and "total: 16 trial-epochs" in out
    # from another directory, `--tracking-uri` names the store the run would write: the estimate reads it
    # (the dry run read the spec's default ./mlflow.db and printed that instead)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["run", str(QUICK), "--dry-run", "epochs=2", "--tracking-uri", "sqlite:///../mlflow.db"]) == 0
    out = capsys.readouterr().out
    assert "8 2 synthetic_translation" in " ".join(out.split()) and f"at sqlite:///{tmp_path / 'mlflow.db'}" in out
    assert not (tmp_path / "elsewhere" / "mlflow.db").exists()


def test_an_empty_seeds_says_it_must_not_be_empty(capsys):
    """`embinit run SPEC seeds=` said "got None"; an empty `seeds:` in a spec (None or []) likewise."""
    assert main(["run", str(QUICK), "seeds=", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "seeds: must not be empty: give a seed count (seeds: 3) or a list of distinct seeds" in err
    assert "(from the command-line override seeds=)" in err and "got None" not in err
    for empty in (None, []):
        with pytest.raises(SpecError, match=r"seeds: must not be empty") as e:
            load_spec({"name": "x", "tasks": ["sst2"], "inits": ["xavier"], "seeds": empty})
        assert len(e.value.problems) == 1


def test_an_unknown_override_hides_none_of_the_other_problems(tmp_path, capsys):
    """`embinit run SPEC epochs=-1 inits=glvoe bogus=1` said one problem, the unknown key: fixed, the next
    run named the other two. One error lists every problem, the overrides' and the spec's alike."""
    with pytest.raises(SpecError) as e:
        load_spec(QUICK, ["epochs=-1", "inits=glvoe", "bogus=1"])
    text = str(e.value)
    assert "'bogus' is neither a spec field nor a hyperparameter" in text
    assert "got -1 (from the command-line override epochs=-1)" in text
    assert "'glvoe' is not a registered init" in text
    with pytest.raises(SpecError):   # well-formed overrides beside a malformed one: still refused
        load_spec(QUICK, ["epochs=2", "bogus=1"])
    assert main(["run", str(QUICK), "epochs=-1", "inits=glvoe", "bogus=1", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "(3 problems)" in err and "epochs=-1" in err and "glvoe" in err and "bogus" in err


def test_a_long_override_name_stays_unique_past_the_cut():
    """Review M2: the suffix was cut at 60 characters, so `max_train_examples=600` and `=700` both logged
    to `...-max_train_exampl`: one MLflow experiment for two smoke tests. A cut name now ends in a hash of
    the whole overrides; a name within the limit is unchanged (existing experiments keep their names)."""
    common = ["epochs=1", "seeds=2", "inits=xavier,pretrained,pretrained_xavier"]
    a = load_spec(QUICK, [*common, "max_train_examples=600"]).experiment_name()
    b = load_spec(QUICK, [*common, "max_train_examples=700"]).experiment_name()
    assert a != b
    for name in (a, b):
        tail = name.removeprefix("quickstart-")
        assert len(tail) == 60 and tail.startswith("epochs1-seeds2-initsxavier_pretrained_pretrained")
        assert tail[-9] == "-" and all(c in "0123456789abcdef" for c in tail[-8:])
    assert load_spec(QUICK, [*common, "max_train_examples=600"]).experiment_name() == a   # stable
    assert load_spec(QUICK, ["epochs=2", "seeds=2"]).experiment_name() == "quickstart-epochs2-seeds2"


def test_a_misspelt_override_gets_the_did_you_mean_a_misspelt_spec_field_gets():
    """Review C1: `epoch=2` listed every spec field and hyperparameter but suggested none, where the same
    typo in a spec file says "did you mean 'epochs'?"."""
    with pytest.raises(SpecError) as e:
        load_spec(QUICK, ["epoch=2"])
    assert "'epoch' is neither a spec field nor a hyperparameter; did you mean 'epochs'? spec fields:" in str(e.value)
    with pytest.raises(SpecError) as e:     # a dotted path: its first part, a spec field
        load_spec(QUICK, ["serach.num_samples=2"])
    assert "did you mean 'search'?" in str(e.value)
    with pytest.raises(SpecError) as e:     # nothing close: no guess, the lists as before
        load_spec(QUICK, ["zzzz=1"])
    assert "did you mean" not in str(e.value) and "hyperparameter; spec fields:" in str(e.value)
