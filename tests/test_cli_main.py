"""The `embinit` entry point: every command group is discovered and documented."""

import subprocess
import sys

import pytest

from embinit.cli import main

COMMANDS = ["inits", "embeddings", "train", "run", "report", "analogy", "similarity", "serve"]


def test_top_level_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in COMMANDS:
        assert command in out


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_has_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert "usage: embinit " + command in capsys.readouterr().out


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 1
    assert "COMMAND" in capsys.readouterr().out


def test_user_error_is_one_line_without_traceback():
    proc = subprocess.run([sys.executable, "-m", "embinit", "embeddings", "stats", "--vocab",
                           "/nonexistent/vocab.txt", "--init", "xavier", "--dim", "8"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "/nonexistent/vocab.txt" in lines[0]

