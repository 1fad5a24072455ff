"""An analogy run's record (style review, finding 4): `run_writers.log_analogy_run` writes it and
`run_readers.analogy_run` reads it back as an `AnalogyRun`; the reproduction's Table 4 matches rows across
runs by slug, and skips a run without a readable result.json with a note naming it. Real MLflow on a
temporary SQLite store."""

from __future__ import annotations

import pytest

from embinit.tracking import mlflow_store, run_readers, run_writers
from embinit.cli import main
from embinit.errors import EmbinitError
from embinit.tracking.records import KIND_TAG
from embinit.reproduction import Inputs
from embinit.reproduction.data import ReproductionData
from embinit.reproduction.table4 import table4_section
from helpers.analogy import QUESTIONS, VECS

pytestmark = pytest.mark.slow  # an MLflow SQLite store takes a few seconds to create


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"


def _row(steps, correct, total=100, paper=None, pe_ratio=None):
    label = " & ".join(["GloVe", *steps])
    return {"label": label, "steps": list(steps), "correct": correct, "total": total,
            "accuracy": 100.0 * correct / total, "paper": paper, "pe_ratio": pe_ratio}


def _log(uri, experiment, seed, rows, name=None, **params):
    """A result.json in the layout `embinit analogy` has always logged (the writer every version has)."""
    params = {"seed": seed, "top": 5893, **params}
    return run_writers.log_analysis_run(experiment, uri, "analogy", name or f"analogy-seed{seed}", {"seed": seed},
                                        {}, {"rows": rows, "params": params, "ratio_sweep": []})


def _rep(uri, experiment):
    return ReproductionData(uri, Inputs(groups=(), analogy_experiment=experiment))


def test_the_cli_writes_the_record_the_reader_reads(uri, tmp_path, capsys):
    vecs = tmp_path / "vecs.txt"
    vecs.write_text("".join(f"{w} {' '.join(str(float(v)) for v in vec)}\n" for w, vec in VECS.items()))
    questions = tmp_path / "questions.txt"
    questions.write_text(QUESTIONS)
    assert main(["analogy", "--embeddings", str(vecs), "--questions", str(questions), "--table4", "--seed", "2",
                 "--max-len", "50", "--tracking-uri", uri, "--log-experiment", "cli-record"]) == 0
    (run,) = run_readers.analysis_records("cli-record", uri, "analogy")
    record = run_readers.analogy_run(run)
    assert (record.run_id, record.name, record.seed) == (run.run_id, "analogy-seed2", 2)
    assert [r.slug for r in record.rows][:3] == ["raw", "scale", "pe"] and "standardize.scale.pe" in \
        [r.slug for r in record.rows]
    raw, pe = record.row("raw"), record.row("pe")
    assert (raw.correct, raw.total, raw.label) == (6, 6, "GloVe") and pe.paper == "1424/1631 (87.3)"
    assert pe.pe_ratio > 0 and raw.pe_ratio is None and raw.detail["syntactic"]["total"] == 1
    # the metrics MLflow holds are the record's own, plus the wall time
    assert {k: v for k, v in run.metrics.items() if k != "wall_time_s"} == pytest.approx(record.metrics())
    assert run.params["seed"] == "2" and record.params["max_len"] == 50 and len(record.ratio_sweep) == 10
    # written back through the library's writer, the same record comes back (with its new run's id)
    again = run_writers.log_analogy_run("cli-record-again", uri, record, 1.5)
    (copy,) = run_readers.analysis_records("cli-record-again", uri, "analogy")
    assert copy.run_id == again and copy.tags.get("embinit.command")   # provenance recorded
    assert run_readers.analogy_run(copy) == type(record)(record.rows, record.params, record.ratio_sweep, again,
                                                         "analogy-seed2")


def test_rows_of_runs_with_different_row_sets_are_matched_by_name(uri):
    """A run logged without --table4 (one row) beside full runs, and a run whose rows come in another order:
    each Table-4 row summarizes the runs that have it, by slug, never by position."""
    full = [_row((), 60), _row(("pe",), 2, paper="1424/1631 (87.3)", pe_ratio=1.0), _row(("standardize",), 50),
            _row(("standardize", "pe"), 10, pe_ratio=0.02)]
    _log(uri, "mixed", 0, full)
    _log(uri, "mixed", 1, [_row(("pe",), 4, pe_ratio=2.0)])
    _log(uri, "mixed", 2, [_row(("standardize", "pe"), 20, pe_ratio=0.04), _row(("standardize",), 52),
                           _row(("pe",), 6, pe_ratio=3.0), _row((), 62)])
    rep = _rep(uri, "mixed")
    section = table4_section(rep)
    rows = {r["slug"]: r for r in rep.exports["table4"]}
    assert list(rows) == ["raw", "pe", "standardize", "standardize.pe"]
    assert rows["pe"]["correct"] == [2, 4, 6] and rows["pe"]["n"] == 3 and rows["pe"]["mean"] == pytest.approx(4.0)
    assert rows["pe"]["pe_ratio"] == pytest.approx(2.0) and rows["pe"]["paper"] == "1424/1631 (87.3)"
    assert rows["raw"]["correct"] == [60, 62] and rows["raw"]["n"] == 2
    assert rows["standardize.pe"]["correct"] == [10, 20] and rows["standardize.pe"]["pe_ratio"] == pytest.approx(0.03)
    assert "| GloVe & pe | 1424/1631 (87.3) | 2–6/100 | 4.0 (2.0) | 3 |" in "\n".join(section.lines)


def test_a_run_without_a_readable_result_is_skipped_with_a_note_naming_it(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    experiment = Inputs().analogy_experiment   # the offline preset's: `embinit reproduction` reads it
    _log(uri, experiment, 0, [_row((), 60), _row(("pe",), 3)])
    c = mlflow_store.client(uri)
    bare = c.create_run(mlflow_store.experiment_id(experiment, uri), run_name="no-result",
                        tags={KIND_TAG: "analogy"}).info.run_id   # e.g. its process died before the artifact
    c.set_terminated(bare, "FINISHED")
    garbled = run_writers.log_analysis_run(experiment, uri, "analogy", "garbled", {"seed": 7}, {}, {})
    c.log_text(garbled, "{not json", "result.json")
    wrong = _log(uri, experiment, 8, [{"label": "GloVe", "steps": "pe"}], name="wrong-rows")

    rep = _rep(uri, experiment)
    assert [r.seed for r in rep.analogy_results] == [0] and len(rep.analogy_notes) == 3
    text = "\n".join(table4_section(rep).lines)
    assert "1 run, one per seed of the random positions (0)" in text
    for name, run_id in (("no-result", bare), ("garbled", garbled), ("wrong-rows", wrong)):
        assert f"- skipped: run '{name}' ({run_id})" in text
    assert {r["slug"]: r["n"] for r in rep.exports["table4"]} == {"raw": 1, "pe": 1}
    # the reader's own messages
    by_name = {r.name: r for r in run_readers.analysis_records(experiment, uri, "analogy")}
    with pytest.raises(EmbinitError, match=f"run 'no-result' \\({bare}\\) has no readable result.json artifact"):
        run_readers.analogy_run(by_name["no-result"])
    with pytest.raises(EmbinitError, match=f"run 'garbled' \\({garbled}\\): its result.json is not an analogy"):
        run_readers.analogy_run(by_name["garbled"])
    with pytest.raises(EmbinitError, match=f"run 'wrong-rows' \\({wrong}\\): .* lacks correct, total"):
        run_readers.analogy_run(by_name["wrong-rows"])
    # the whole document renders from that store (the analogy runs are all it holds)
    out = tmp_path / "repro.md"
    assert main(["reproduction", "--tracking-uri", uri, "--inputs", "offline", "--out", str(out)]) == 0
    assert f"- skipped: run 'no-result' ({bare}) has no readable result.json artifact" in out.read_text()


# what the offline preset's analogy command logs (`Inputs.analogy_command`), by the names of its files
OFFLINE = {"embeddings": "/a/glove.6B.50d.txt", "questions": "/d/analogy/questions-words.txt", "task": "multi30k",
           "top": 5893, "words": 5400}


def test_a_seed_logged_again_counts_once_by_its_newest_run(uri):
    """reproduce.sh logs seeds 0-4 on every run: a repeated seed is the same computation, not a new seed
    (review W1: n = 3 from 2 seeds, a narrower interval on a copy). The newest run of each seed counts."""
    old = _log(uri, "again", 0, [_row((), 60), _row(("pe",), 2)], name="first", **OFFLINE)
    new = _log(uri, "again", 0, [_row((), 61), _row(("pe",), 3)], name="second", **OFFLINE)
    _log(uri, "again", 1, [_row((), 63), _row(("pe",), 5)], **OFFLINE)
    rep = _rep(uri, "again")
    text = "\n".join(table4_section(rep).lines)
    rows = {r["slug"]: r for r in rep.exports["table4"]}
    assert rows["raw"]["n"] == 2 and rows["raw"]["correct"] == [61, 63] and rows["pe"]["mean"] == pytest.approx(4.0)
    assert [r.run_id for r in rep.analogy_results][0] == new
    assert "2 runs, one per seed of the random positions (0, 1); an earlier run of a seed is left out" in text
    assert f"- left out: run 'first' ({old}): seed 0 again; the newest run of that seed, 'second' ({new}), counts" \
        in text
    assert "| GloVe | — | 61–63/100 | 62.0 (1.4) | 2 |" in text


def test_runs_of_another_configuration_are_left_out_and_named(uri):
    """Runs logged with another --top/--task/embeddings are another measurement: not pooled. The table shows
    the configuration the reproduction's command logs even when another has more seeds, and names the rest."""
    for seed in (0, 1):
        _log(uri, "configs", seed, [_row((), 60 + seed)], **OFFLINE)
    for seed in (0, 1, 2):   # --top alone: the first 30000 rows of the file, another vocabulary
        _log(uri, "configs", seed, [_row((), 40)], **{**OFFLINE, "task": "", "top": 30000, "words": 30000})
    _log(uri, "configs", 0, [_row((), 20)], **{**OFFLINE, "embeddings": "/a/glove.6B.100d.txt"})
    rep = _rep(uri, "configs")
    text = "\n".join(table4_section(rep).lines)
    assert [r.seed for r in rep.analogy_results] == [0, 1] and rep.exports["table4"][0]["correct"] == [60, 61]
    assert "vocabulary: the 5893 most frequent target words of `multi30k` (5400 found in the vectors)" in text
    assert "Runs of other configurations are not pooled with these (left out below)." in text
    assert ("- left out: 3 runs (seeds 0, 1, 2) of another configuration: task `` (shown: `multi30k`), "
            "top `30000` (shown: `5893`), words `30000` (shown: `5400`)") in text
    assert ("- left out: 1 run (seeds 0) of another configuration: embeddings `glove.6B.100d.txt` (shown: "
            "`glove.6B.50d.txt`)") in text


def test_a_top_above_the_vocabulary_says_every_word(uri, tmp_path):
    """`--top 5893` over Multi30k's 5,888 words took all of them, which the table called "the 5893 most
    frequent target words". A run records the restriction's size (`vocab_words`); a run logged before it
    did is the same configuration (pooled, not left out), and keeps the old wording alone."""
    _log(uri, "all", 0, [_row((), 60)], **OFFLINE)                        # logged before vocab_words
    _log(uri, "all", 1, [_row((), 62)], **OFFLINE, vocab_words=5888)
    rep = _rep(uri, "all")
    text = "\n".join(table4_section(rep).lines)
    assert [r.seed for r in rep.analogy_results] == [0, 1] and "left out" not in text
    assert ("vocabulary: all 5888 target words of `multi30k` (`--top 5893` is more than there are) (5400 found "
            "in the vectors)") in text
    _log(uri, "cut", 0, [_row((), 60)], **{**OFFLINE, "top": 1000, "vocab_words": 1000})
    assert "vocabulary: the 1000 most frequent target words of `multi30k`" in "\n".join(
        table4_section(_rep(uri, "cut")).lines)
    # the CLI records it: 4 words (specials dropped) under --top 9
    vecs, questions, vocab = tmp_path / "v.txt", tmp_path / "q.txt", tmp_path / "vocab.txt"
    vecs.write_text("".join(f"{w} {' '.join(str(float(v)) for v in vec)}\n" for w, vec in VECS.items()))
    questions.write_text(QUESTIONS)
    vocab.write_text("<pad>\n" + "".join(f"{w}\t{9 - i}\n" for i, w in enumerate(list(VECS)[:4])))
    assert main(["analogy", "--embeddings", str(vecs), "--questions", str(questions), "--vocab", str(vocab),
                 "--top", "9", "--tracking-uri", uri, "--log-experiment", "cli-all"]) == 0
    (run,) = run_readers.analysis_records("cli-all", uri, "analogy")
    assert run_readers.analogy_run(run).params["vocab_words"] == 4


def test_without_the_expected_configuration_the_one_with_most_seeds_is_shown(uri):
    plain = {**OFFLINE, "task": "", "top": 5893, "words": 5893}
    for seed in (0, 1, 2):
        _log(uri, "most", seed, [_row((), 50)], **plain)
    _log(uri, "most", 0, [_row((), 10)], **{**plain, "max_len": 50})
    rep = _rep(uri, "most")
    text = "\n".join(table4_section(rep).lines)
    assert [r.seed for r in rep.analogy_results] == [0, 1, 2] and rep.exports["table4"][0]["mean"] == 50.0
    # --top without --task is the file's first rows: no "most frequent target words of ``"
    assert "vocabulary: the first 5893 rows of the embeddings file (no --task or --vocab)" in text
    assert "of ``" not in text and "- left out: 1 run (seeds 0) of another configuration: max_len `50`" in text
