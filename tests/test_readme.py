"""The README's commands work: the two set-up commands exist and do what it says, and every
`embinit ...` command it shows is a real command whose spec files parse."""

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from embinit.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _make_dry_run(target: str) -> str:
    proc = subprocess.run(["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_readme_names_exactly_the_two_setup_commands():
    setup = README.split("## Set up and run")[1].split("```")[1]
    commands = [line.split("#")[0].strip() for line in setup.splitlines() if line.strip()]
    assert commands[1:] == ["make run", "make test"]


@pytest.mark.parametrize("target", ["run", "test"])
def test_setup_installs_cpu_torch_before_the_project(target):
    steps = _make_dry_run(target)
    torch_at, project_at = steps.index("torch==2.13.0"), steps.index('-e ".[test]"')
    assert torch_at < project_at


def test_make_run_runs_the_quickstart_and_make_test_runs_pytest():
    assert "embinit run tune_configs/quickstart.yaml" in _make_dry_run("run")
    assert "pytest" in _make_dry_run("test")
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_every_embinit_subcommand_in_the_readme_exists(capsys):
    # commands as the README shows them: in code blocks and table cells, after a prompt or venv path
    used = set(re.findall(r"(?:^|[`/])embinit (\w+)", README, flags=re.M))
    assert {"run", "report", "train", "inits", "serve"} <= used
    for command in used:
        with pytest.raises(SystemExit) as exc:
            main([command, "--help"])
        assert exc.value.code == 0, command


def test_quickstart_spec_expands(capsys):
    assert main(["run", str(ROOT / "tune_configs" / "quickstart.yaml"), "--dry-run"]) == 0
    assert "9 trials" in capsys.readouterr().out  # 3 inits x 3 seeds


def test_a_superseded_spec_the_readme_runs_names_its_successor():
    for path in sorted(set(re.findall(r"tune_configs/[\w/.-]+\.ya?ml", README))):
        header = (ROOT / path).read_text()
        successor = re.search(r"SUPERSEDED by (tune_configs/\S+\.ya?ml)", header)
        if successor:
            assert successor.group(1) in README, f"the README runs {path} without saying it is superseded"


def test_the_readme_does_not_claim_measured_findings_the_reproduction_lacks():
    entry = next(line for line in README.split("\n- ") if line.startswith("[docs/reproduction.md]"))
    doc = (ROOT / "docs" / "reproduction.md").read_text()
    if "not run yet" in doc:
        assert "not run yet" in entry and "findings measured" not in entry



def _subcommands(parser: argparse.ArgumentParser) -> dict:
    return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def _table_usages():
    """Each `embinit ...` usage in the README's table of commands: its parsers (an `a|b` word: each
    of them) and the flags it shows."""
    table = README.split("## The pieces")[1].split("\n\n")[1]
    cells = re.findall(r"^\| `(embinit .*?)` \|", table.replace("\\|", "/"), flags=re.M)
    for usage in (u for cell in cells for u in cell.split("`<br>`")):
        parsers = [build_parser()]
        for word in usage.split()[1:]:
            if not re.fullmatch(r"[a-z]+(/[a-z]+)*", word):
                break
            parsers = [_subcommands(p)[w] for p in parsers for w in word.split("/")]
        yield usage, parsers, re.findall(r"(?<![\w-])--[a-z][\w-]*", usage)


def test_every_flag_in_the_readmes_table_of_commands_exists():
    usages = list(_table_usages())
    assert len(usages) >= 10
    problems = []
    for usage, parsers, flags in usages:
        for parser in parsers:
            known = {s for a in parser._actions for s in a.option_strings}
            problems += [f"{parser.prog}: {f} ({usage})" for f in flags if f not in known]
    assert not problems, problems


def test_the_readmes_table_of_commands_has_a_row_for_every_command():
    rows = {usage.split()[1] for usage, _, _ in _table_usages()}
    assert rows == set(_subcommands(build_parser()))
