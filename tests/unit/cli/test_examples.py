"""Every tool's ``--help`` ends with examples, and every example parses with the real parser
(so none names a flag or a verb that does not exist); ``sim show`` prints a scenario's file."""

from __future__ import annotations

import shlex

import pytest

from kafkasim.cli.examples import EXAMPLES
from kafkasim.cli.main import build_parser
from tests.cli_run import kafkasim


def _subcommands() -> dict[str, object]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return dict(action.choices)  # type: ignore[arg-type]


def test_every_tool_has_examples() -> None:
    assert sorted(_subcommands()) == sorted(EXAMPLES)


@pytest.mark.parametrize("line", [line for examples in EXAMPLES.values() for line, _ in examples])
def test_example_parses(line: str) -> None:
    argv = shlex.split(line)
    assert argv[0] == "kafkasim"
    try:
        args = build_parser().parse_args(argv[1:])
    except SystemExit as e:  # argparse's way of refusing
        pytest.fail(f"example does not parse ({e.code}): {line}")
    assert callable(args.func)


def test_help_ends_with_the_examples_verbatim() -> None:
    out = kafkasim("topics", "--help")
    assert out.returncode == 0, out.stderr
    tail = out.stdout.split("examples:\n", 1)[1]
    assert "  # a replicated topic\n" in tail
    assert (
        "  kafkasim topics --dir cluster --create --topic events --partitions 3 "
        "--replication-factor 3 --config min.insync.replicas=2\n" in tail
    )


def test_sim_show_prints_the_catalog_file_and_names_unknown_ones() -> None:
    out = kafkasim("sim", "show", "leader-crash")
    assert out.returncode == 0, out.stderr
    assert 'name = "leader-crash"' in out.stdout and "[[faults]]" in out.stdout
    bad = kafkasim("sim", "show", "no-such-scenario")
    assert bad.returncode == 1
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "no such scenario in the catalog" in lines[0], bad.stderr
