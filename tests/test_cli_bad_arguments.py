"""A bad command-line value is a one-line usage error before any work (exit 2), not a traceback after it:
a port out of range, a non-positive length, a URL without a scheme, a folder that is a file."""

from __future__ import annotations

import pytest

from embinit.cli import main


@pytest.mark.parametrize("argv, message", [
    (["serve", "--port", "99999"], "argument --port: a port is 1-65535, got 99999"),
    (["serve", "--port", "http"], "argument --port: expected a whole number, got 'http'"),
    (["embeddings", "stats", "--vocab", "v.txt", "--init", "xavier", "--pe-length", "0"],
     "argument --pe-length: must be >= 1, got 0"),
    (["embeddings", "stats", "--vocab", "v.txt", "--init", "xavier", "--pe-base", "0"],
     "argument --pe-base: must be a finite number > 0, got 0"),
    (["embeddings", "stats", "--vocab", "v.txt", "--init", "xavier", "--pe-base", "ten"],
     "argument --pe-base: expected a number, got 'ten'"),
    (["experiments", "list", "--url", "notaurl"],
     "argument --url: expected an http(s) URL such as http://127.0.0.1:8000, got 'notaurl'"),
    (["train", "--task", "synthetic_lm", "--epochs", "1", "--out", "{file}"], "argument --out: '{file}' is a file"),
    (["report", "exp", "--plot", "{file}"], "argument --plot: '{file}' is a file, not a folder"),
])
def test_a_bad_value_is_a_usage_error_before_any_work(argv, message, tmp_path, capsys):
    file = tmp_path / "a-file"
    file.write_text("kept\n")
    argv = [a.replace("{file}", str(file)) for a in argv]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message.replace("{file}", str(file)) in err and "Traceback" not in err
    assert file.read_text() == "kept\n"


def test_a_bad_api_url_in_the_environment_is_named(monkeypatch, capsys):
    monkeypatch.setenv("EMBINIT_API_URL", "localhost:8000")
    assert main(["experiments", "list"]) == 2
    assert "EMBINIT_API_URL: expected an http(s) URL" in capsys.readouterr().err


def test_a_folder_that_can_be_made_is_accepted(tmp_path, capsys):
    """`--plot` names a folder that need not exist yet: the check passes it (the report then fails on
    the missing store, which says so)."""
    assert main(["report", "exp", "--plot", str(tmp_path / "new" / "plots"),
                 "--tracking-uri", f"sqlite:///{tmp_path}/none.db"]) == 2
    err = capsys.readouterr().err
    assert "--plot" not in err and err.startswith("embinit: error: ")
