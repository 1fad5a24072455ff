import json

import numpy as np
import pytest
import torch

from embinit.cli import main
from helpers.analogy import QUESTIONS, VECS

torch.set_num_threads(1)


def write_glove(path, vecs):
    path.write_text("".join(f"{w} {' '.join(str(float(v)) for v in vec)}\n" for w, vec in vecs.items()))
    return path


@pytest.fixture
def files(tmp_path):
    glove = write_glove(tmp_path / "vecs.txt", VECS)
    questions = tmp_path / "questions.txt"
    questions.write_text(QUESTIONS)
    return glove, questions


def run_json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_analogy_json_on_glove_text(files, capsys):
    glove, questions = files
    out = run_json(capsys, ["analogy", "--embeddings", str(glove), "--questions", str(questions), "--json"])
    (row,) = out["rows"]
    assert (row["correct"], row["total"], row["oov"]) == (6, 6, 1)
    assert row["label"] == "GloVe" and row["steps"] == []
    assert row["syntactic"]["total"] == 1


def test_analogy_vocab_restriction_and_transform(files, tmp_path, capsys):
    glove, questions = files
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("<pad>\n<unk>\nfrance\t9\nparis\t8\nitaly\t7\nrome\t6\nzebra\t5\n")
    out = run_json(capsys, ["analogy", "--embeddings", str(glove), "--questions", str(questions),
                            "--vocab", str(vocab), "--transform", "standardize,scale", "--json"])
    (row,) = out["rows"]
    assert row["total"] == 2 and row["vocab_size"] == 4          # zebra is not in the vectors
    assert row["label"] == "GloVe & Xavier-Std. & Scaled"
    top2 = run_json(capsys, ["analogy", "--embeddings", str(glove), "--questions", str(questions),
                             "--vocab", str(vocab), "--top", "2", "--json"])
    assert top2["rows"][0]["total"] == 0
    # a --top above the vocabulary's size is every word, and the text says so (Table 4's "5,893 most
    # frequent" of Multi30k's 5,888 words)
    assert main(["analogy", "--embeddings", str(glove), "--questions", str(questions), "--vocab", str(vocab),
                 "--top", "9"]) == 0
    assert "--top 9 is more than the vocabulary's 5 words (specials dropped): every one of them is used" in \
        capsys.readouterr().out
    assert main(["analogy", "--embeddings", str(glove), "--questions", str(questions), "--vocab", str(vocab),
                 "--top", "5"]) == 0
    assert "is more than" not in capsys.readouterr().out


def test_analogy_on_a_checkpoint_and_first_rows(files, tmp_path, capsys):
    glove, questions = files
    tokens = ["<pad>", "<unk>"] + list(VECS)
    table = torch.tensor([[0.0] * 6, [0.1] * 6] + list(VECS.values()))
    torch.save({"embeddings": {"tgt": table, "src": table[:3]}, "vocabs": {"tgt": tokens, "src": tokens[:3]},
                "config": {"task": "multi30k"}}, tmp_path / "best.pt")
    out = run_json(capsys, ["analogy", "--embeddings", str(tmp_path / "best.pt"), "--questions",
                            str(questions), "--key", "tgt", "--json"])
    row = out["rows"][0]
    assert (row["correct"], row["total"]) == (6, 6) and row["label"] == "checkpoint"
    assert out["source"].endswith("best.pt:tgt")
    first4 = run_json(capsys, ["analogy", "--embeddings", str(glove), "--questions", str(questions),
                               "--top", "4", "--json"])
    assert first4["rows"][0]["vocab_size"] == 4 and first4["rows"][0]["total"] == 2


def test_analogy_table4_text(files, capsys):
    glove, questions = files
    assert main(["analogy", "--embeddings", str(glove), "--questions", str(questions), "--table4",
                 "--max-len", "50", "--sections"]) == 0
    text = capsys.readouterr().out
    assert "GloVe & Xavier-Std. & Pos. Enc." in text and "210/1631 (12.9)" in text
    assert "capital-common-countries" in text
    assert "GloVe & Scaled & Pos. Enc." in text and "(not in the paper)" in text


def test_analogy_table4_text_shows_the_ratio_behind_each_encoding_row(files, capsys):
    """σ(words)/σ(PE) per row and the ratio sweep are computed for --table4: the text shows them too,
    the evidence for why a row with encodings keeps or loses its analogies at this D."""
    from embinit.analysis.sources import load_embeddings
    from embinit.analysis.table4 import chain_ratio

    glove, questions = files
    assert main(["analogy", "--embeddings", str(glove), "--questions", str(questions), "--table4",
                 "--max-len", "50"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "σ(words)/σ(PE)" in lines[1]
    emb = load_embeddings(glove)
    pe_row = next(line for line in lines if line.startswith("GloVe & Pos. Enc. "))
    assert f"{chain_ratio(emb.matrix, ('pe',), max_len=50):.3g}" in pe_row
    raw_row = next(line for line in lines if line.startswith("GloVe  "))
    assert raw_row.split()[-1] == "-"                # no encodings added, no ratio
    sweep = lines[lines.index(next(line for line in lines if line.startswith("ratio sweep"))) + 1:]
    assert [line.split()[0] for line in sweep] == ["0.03", "0.1", "0.3", "0.5", "1", "2", "3", "5", "10", "30"]
    assert sweep[-1].split()[1] == "6/6"


def test_analogy_user_errors(files, capsys):
    glove, questions = files
    assert main(["analogy", "--embeddings", str(glove), "--questions", str(questions),
                 "--transform", "scale,bogus"]) == 2
    assert "'bogus' is not a registered analogy transform" in capsys.readouterr().err
    assert main(["analogy", "--embeddings", "/nonexistent.txt", "--questions", str(questions)]) == 2
    assert "embeddings not found" in capsys.readouterr().err


def test_each_bad_input_of_a_command_is_listed_at_once(files, tmp_path, capsys):
    """analogy named its first bad input (the transform, then the questions, then the vocabulary, then the
    embeddings), similarity its A before its B, embeddings stats its vocabulary before its init: one run
    per mistake. Each is listed now, one a line; a lone problem is still said as it was."""
    glove, _ = files
    binary = tmp_path / "vecs.bin"
    binary.write_bytes(b"\x8f\x01\xfe\n")
    cases = [
        (["analogy", "--embeddings", str(tmp_path / "none.txt"), "--questions", str(glove), "--transform", "scael",
          "--vocab", str(tmp_path / "none.vocab")],
         "cannot run the analogy test (4 problems):", ["'scael' is not a registered analogy transform",
                                                       f"{glove}: ",
                                                       f"vocabulary file not found: {tmp_path / 'none.vocab'}",
                                                       "embeddings not found: "]),
        (["similarity", str(tmp_path / "none.txt"), str(binary)],
         "cannot compare the tables (2 problems):", ["embeddings not found: ", f"{binary}:1: expected `word v1"]),
        (["embeddings", "stats", "--vocab", str(tmp_path / "none.vocab"), "--init", "glvoe"],
         "cannot build the table (2 problems):", ["vocabulary file not found: ", "'glvoe' is not a registered init"]),
    ]
    for argv, head, items in cases:
        assert main(argv) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert lines[0] == f"embinit: error: {head}", lines
        assert len(lines) == 1 + len(items) and all(line.startswith(f"  - {item}")
                                                    for line, item in zip(lines[1:], items)), lines


def save_npy(tmp_path, name, matrix, tokens):
    np.save(tmp_path / f"{name}.npy", matrix.numpy())
    (tmp_path / f"{name}.vocab.txt").write_text("\n".join(tokens) + "\n")
    return tmp_path / f"{name}.npy"


def test_similarity_npy_identical_and_rotated(tmp_path, capsys):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(50, 8, generator=g, dtype=torch.float64)
    q, _ = torch.linalg.qr(torch.randn(8, 8, generator=g, dtype=torch.float64))
    tokens = [f"t{i}" for i in range(50)]
    a = save_npy(tmp_path, "a", x, tokens)
    b = save_npy(tmp_path, "b", x @ q, tokens)
    out = run_json(capsys, ["similarity", str(a), str(b), "--k", "5", "--json"])
    assert out["mean"] == 1.0 and out["tokens"] == 50 and out["alignment"] is None


def test_similarity_checkpoints_with_different_vocabularies(tmp_path, capsys):
    g = torch.Generator().manual_seed(1)
    ta, tb = [f"w{i}" for i in range(40)], [f"w{i}" for i in range(10, 60)]
    m = torch.randn(60, 6, generator=g)
    torch.save({"embeddings": {"tok": m[:40]}, "vocabs": {"tok": ta}}, tmp_path / "a.pt")
    torch.save({"embeddings": {"tok": m[10:60], "src": m[10:60]}, "vocabs": {"tok": tb}}, tmp_path / "b.pt")
    out = run_json(capsys, ["similarity", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--k", "4",
                            "--metric", "overlap", "--json"])
    # the same vectors for the 30 shared tokens: identical neighbourhoods within the shared set
    assert out["tokens"] == 30 and out["mean"] == 1.0
    assert "30 shared tokens" in out["alignment"]
    assert main(["similarity", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--k", "30"]) == 2
    assert "k=30 must be smaller than the number of tokens N=30" in capsys.readouterr().err
    assert main(["similarity", str(tmp_path / "a.pt"), str(tmp_path / "b.pt"), "--key", "tgt"]) == 2
    assert "'tgt' is not a table" in capsys.readouterr().err


def test_similarity_text_output_with_weights(tmp_path, capsys):
    g = torch.Generator().manual_seed(2)
    tokens = [f"w{i}" for i in range(30)] + [",", "."]
    a = save_npy(tmp_path, "a", torch.randn(32, 4, generator=g), tokens)
    b = save_npy(tmp_path, "b", torch.randn(32, 5, generator=g), tokens)
    counts = tmp_path / "counts.txt"
    counts.write_text("".join(f"{t}\t{i + 1}\n" for i, t in enumerate(tokens)))
    assert main(["similarity", str(a), str(b), "--k", "3", "--weights", str(counts),
                 "--exclude-punctuation"]) == 0
    text = capsys.readouterr().out
    assert "over 30 tokens" in text and "frequency-weighted" in text and "(D=5)" in text


@pytest.mark.slow
def test_similarity_from_mlflow_run_ids(tmp_path, capsys):
    mlflow = pytest.importorskip("mlflow")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    exp = mlflow.create_experiment("sim", artifact_location=(tmp_path / "artifacts").as_uri())
    g = torch.Generator().manual_seed(3)
    tokens = [f"w{i}" for i in range(25)]
    run_ids = []
    for seed in range(2):
        ckpt = tmp_path / f"run{seed}" / "best.pt"
        ckpt.parent.mkdir()
        torch.save({"embeddings": {"tok": torch.randn(25, 6, generator=g)}, "vocabs": {"tok": tokens},
                    "config": {"seed": seed}}, ckpt)
        with mlflow.start_run(experiment_id=exp) as run:
            mlflow.log_artifact(str(ckpt), artifact_path="checkpoint")
            run_ids.append(run.info.run_id)
    assert main(["similarity", run_ids[0], run_ids[1], "--k", "3", "--tracking-uri", uri, "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["a"].startswith(f"run {run_ids[0]}") and out["tokens"] == 25
    # named by the run's artifact, not by the temporary download (deleted once read), and without
    # MLflow's "Downloading artifacts" progress bars on stderr
    assert (out["a"], out["b"]) == (f"run {run_ids[0]} (checkpoint/best.pt:tok)",
                                    f"run {run_ids[1]} (checkpoint/best.pt:tok)")
    assert "Downloading artifacts" not in captured.err
    same = run_json(capsys, ["similarity", run_ids[0], f"runs:/{run_ids[0]}", "--k", "3",
                             "--tracking-uri", uri, "--json"])
    assert same["mean"] == 1.0
    missing = "0" * 32
    assert main(["similarity", missing, run_ids[0], "--tracking-uri", uri]) == 2
    assert f"cannot download checkpoint/best.pt of MLflow run {missing}" in capsys.readouterr().err


@pytest.mark.slow
def test_similarity_of_a_run_without_a_checkpoint_says_why(tmp_path, capsys):
    """The quickstart's trials log no checkpoint (mlflow.log_checkpoint: false): `embinit similarity` of their
    run ids says so, and a sweep's run id is named as one, not only "Failed to download artifacts"."""
    mlflow = pytest.importorskip("mlflow")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    exp = mlflow.create_experiment("nockpt", artifact_location=(tmp_path / "artifacts").as_uri())
    with mlflow.start_run(experiment_id=exp, run_name="Xavier-s0") as trial:
        mlflow.log_metric("test/bleu", 1.0)
    with mlflow.start_run(experiment_id=exp, run_name="quickstart", tags={"embinit.kind": "sweep"}) as sweep:
        pass
    assert main(["similarity", trial.info.run_id, trial.info.run_id, "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err
    assert f"the trial run {trial.info.run_id} (Xavier-s0, FINISHED) logged no checkpoint" in err
    assert "mlflow.log_checkpoint: false" in err
    assert main(["similarity", sweep.info.run_id, trial.info.run_id, "--tracking-uri", uri]) == 2
    assert "(quickstart) is a sweep run (embinit.kind=sweep), not a trial's" in capsys.readouterr().err


def test_vector_file_words_with_spaces_and_header(tmp_path, capsys):
    from embinit.analysis.sources import load_embeddings

    text = tmp_path / "w2v.txt"
    text.write_text("4 2\nnew york 1.0 0.0\nparis 0.5 0.5\nparis 9 9\nrome 0.0 1.0\n")   # N counts rows
    with pytest.warns(RuntimeWarning, match="'paris' \\(lines 3, 4\\)"):
        emb = load_embeddings(text)
    assert emb.tokens == ["new york", "paris", "rome"]
    assert emb.matrix.tolist() == [[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]]   # the first 'paris' row wins


@pytest.mark.slow
def test_analogy_log_experiment_records_every_row_in_mlflow(files, tmp_path, capsys):
    from embinit.tracking import run_readers
    glove, questions = files
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert main(["analogy", "--embeddings", str(glove), "--questions", str(questions), "--table4", "--seed", "3",
                 "--max-len", "50", "--tracking-uri", uri, "--log-experiment", "t4"]) == 0
    assert "logged to MLflow run" in capsys.readouterr().out
    (run,) = run_readers.analysis_records("t4", uri, "analogy")
    m = run.metrics
    assert (m["analogy/raw/correct"], m["analogy/raw/total"]) == (6.0, 6.0)
    assert "analogy/standardize.pe/correct" in m and "analogy/scale.pe/total" in m
    assert run.params["seed"] == "3" and run.params["max_len"] == "50"
    # the Table-4 evidence: σ(words)/σ(PE) per encoding row and the ratio sweep in result.json
    assert m["analogy/pe/pe_ratio"] > 0 and "analogy/standardize/pe_ratio" not in m
    assert "analogy/standardize.scale.pe/correct" in m and "analogy/pe.standardize/correct" in m
    import json
    result = json.loads(run_readers.artifact_text(run, "result.json", uri))
    assert [r["ratio"] for r in result["ratio_sweep"]][:2] == [0.03, 0.1]
    assert all(r["total"] == 6 for r in result["ratio_sweep"]) and result["ratio_sweep"][-1]["correct"] == 6
    assert run_readers.analysis_records("missing", uri, "analogy") == []


def test_similarity_reports_the_blogs_score_beside_jaccard(tmp_path, capsys):
    g = torch.Generator().manual_seed(3)
    tokens = [f"w{i}" for i in range(60)]
    x = torch.randn(60, 6, generator=g)
    a = save_npy(tmp_path, "a", x, tokens)
    b = save_npy(tmp_path, "b", x + 0.7 * torch.randn(60, 6, generator=g), tokens)
    out = run_json(capsys, ["similarity", str(a), str(b), "--k", "5", "--json"])
    from embinit.analysis.similarity import knn_match_similarity
    for metric in ("jaccard", "overlap"):
        ref = knn_match_similarity(np.load(a), np.load(b), k=5, metric=metric).summary
        assert out["scores"][metric] == {"mean": ref["mean"], "median": ref["median"]}
    assert out["scores"]["overlap"]["mean"] > out["scores"]["jaccard"]["mean"] == out["mean"]
    assert main(["similarity", str(a), str(b), "--k", "5"]) == 0
    assert "beside it, overlap (|∩|/K, the post's code and numbers): mean" in capsys.readouterr().out


def test_analogy_says_how_many_lines_it_skipped(files, tmp_path, capsys):
    from embinit.cli import main
    glove, questions = files
    noisy = tmp_path / "q.txt"
    noisy.write_text(questions.read_text() + "not four words\n")
    assert main(["analogy", "--embeddings", str(glove), "--questions", str(noisy)]) == 0
    assert "lines not of four words skipped)" in capsys.readouterr().out


@pytest.mark.parametrize("top", ["0", "-5"])
def test_a_non_positive_top_is_refused(files, tmp_path, capsys, top):
    glove, questions = files
    assert main(["similarity", str(glove), str(glove), "--top", top]) == 2
    assert f"--top) must be a positive number of rows, got {top}" in capsys.readouterr().err
    assert main(["analogy", "--embeddings", str(glove), "--questions", str(questions), "--top", top]) == 2
    assert f"--top) must be a positive number of rows, got {top}" in capsys.readouterr().err


@pytest.mark.slow
def test_analyses_read_and_log_only_to_an_mlflow_store(files, tmp_path, capsys):
    """`analogy --log-experiment` and a run id as the embeddings open the store at --tracking-uri:
    another application's SQLite file is refused before the analysis, and left as it was."""
    from helpers.bad_stores import notes_db, snapshot
    glove, questions = files
    db = notes_db(tmp_path / "notes.db")
    before = snapshot(db)
    refused = f"{db} is not an MLflow store: it has tables [notes]; give a new file or an MLflow store"
    for argv in (["analogy", "--embeddings", str(glove), "--questions", str(questions), "--log-experiment", "t4"],
                 ["analogy", "--embeddings", "0" * 32, "--questions", str(questions)],
                 ["similarity", "0" * 32, str(glove)]):
        assert main([*argv, "--tracking-uri", f"sqlite:///{db}"]) == 2
        out, err = capsys.readouterr()
        assert refused in err and len(err.strip().splitlines()) == 1 and "logged" not in out, err
        assert snapshot(db) == before
