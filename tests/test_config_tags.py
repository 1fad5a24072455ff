"""A trial's config longer than MLflow's 8,000 characters of a tag value (a task defined with hundreds of
labels): MLflow cut it silently, and the cut JSON failed every reader of the experiment (the report, the
service, a resumed sweep); it now goes on in further tags and reads back whole."""

from __future__ import annotations

import json

import pytest

from embinit.config import TrialConfig
from embinit.spec.loading import load_spec
from embinit.spec.problems import SpecError
from embinit.task_registry import DEFINED, unregister
from embinit.tracking import mlflow_store, records, run_readers, trial_run

from test_task_defs import IMDB, spec

LABELS = [f"intent_{i:04d}_{'x' * 8}" for i in range(1000)]   # ~22,000 characters of JSON


@pytest.fixture(autouse=True)
def _forget_definitions():
    yield
    for name in list(DEFINED):
        unregister(name)


def test_a_config_past_a_tags_limit_reads_back_whole_from_either_reader(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    exp = mlflow_store.ensure_experiment("long", uri)
    config = TrialConfig(task="intents", seed=0, task_def={**IMDB, "labels": LABELS}).to_dict()
    n = -(-len(json.dumps(config, sort_keys=True)) // records.TAG_VALUE_CHARS)
    assert n >= 3
    run = trial_run.TrialRun.open(uri, exp, None, config, "k-long", "Xavier", {})
    tags = mlflow_store.client(uri).get_run(run.run_id).data.tags
    assert {k for k in tags if k.startswith(records.CONFIG_TAG)} == \
        {records.CONFIG_TAG, *(f"{records.CONFIG_TAG}.{i}" for i in range(1, n))}
    assert all(len(tags[k]) <= records.TAG_VALUE_CHARS for k in tags)
    (sql,) = run_readers.trial_records(exp, uri)                               # plain SQL rows
    (client,) = records.from_runs(mlflow_store.search_runs(exp, uri))        # MLflow's search_runs
    assert sql.config == client.config == json.loads(json.dumps(config, default=str))
    assert sql.config["task_def"]["labels"] == LABELS


def test_a_config_mlflow_cut_before_reads_as_none_not_as_an_error():
    assert records.config_of({records.CONFIG_TAG: '{"task": "intents", "task_def": {"labels": ["a", "b'}) == {}
    assert records.config_of({}) == {}


@pytest.mark.parametrize("tag, problem", [
    ('{"task": "intents", "task_def": {"labels": ["a", "b', "is not valid JSON (Unterminated string"),
    ("[1, 2]", "is JSON but not an object (a list)"),
])
def test_a_config_tag_that_is_no_config_is_said_to_be_so_by_the_run_id_when_rerun(tag, problem):
    """`embinit train --from-run` of such a run said "TrialConfig.__init__() missing 1 required positional
    argument: 'task'", of the empty config the record reads it as."""
    from types import SimpleNamespace

    from embinit.errors import EmbinitError
    from embinit.rerun import recorded_config
    tags = {records.KEY_TAG: "k", records.CONFIG_TAG: tag}
    run = SimpleNamespace(data=SimpleNamespace(tags=tags, metrics={}),
                          info=SimpleNamespace(run_id="r-cut", status="FINISHED", start_time=0, end_time=None))
    rec = records.from_run(run)
    assert rec.config == {}
    with pytest.raises(EmbinitError) as e:
        recorded_config(rec)
    assert str(e.value).startswith(f"the embinit.config tag of MLflow run r-cut {problem}"), str(e.value)
    assert "'task'" not in str(e.value)


def test_a_definition_is_at_most_100000_characters():
    with pytest.raises(SpecError, match=r"define_tasks.intents: the definition is 1\d\d,\d\d\d characters of JSON; "
                                        r"at most 100,000"):
        load_spec(spec({"intents": {**IMDB, "labels": LABELS * 5}}, ["sst2"]))


def test_a_group_tag_that_is_not_json_reads_as_no_group_not_as_an_error():
    """One run's cut or edited `embinit.group` tag raised a bare JSONDecodeError in every reader of its
    experiment (the report, the service, a resumed sweep)."""
    from types import SimpleNamespace
    for tag in ('{"axes": {', "[1]"):
        tags = {records.KEY_TAG: "k", records.CONFIG_TAG: "{}", records.GROUP_TAG: tag}
        run = SimpleNamespace(data=SimpleNamespace(tags=tags, metrics={}),
                              info=SimpleNamespace(run_id="r", status="FINISHED", start_time=0, end_time=None))
        assert records.from_run(run).group == {}
