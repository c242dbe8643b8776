"""A ``kafkasim VERB`` process imports that verb's module only, and the command line still
answers as one parser with every verb: ``kafkasim --help`` lists them all, an unknown verb is
refused with the full list, and a verb's own help and errors are the same whether its parser
was built alone or among all the others."""

from __future__ import annotations

import argparse

import pytest

from kafkasim.cli.main import VERBS, build_parser, main, verb_named
from tests.cli_run import python

# What the process of each verb may load of the verbs' modules: its own and those it imports.
_LOADED = {
    "broker": {"broker"},
    "cluster": {"cluster"},
    "topics": {"topics"},
    "console-consumer": {"console_consumer", "console_producer"},
}
# Printed by the probe below: which of the verbs' modules (and the console's) are loaded.
_PROBE = (
    "import sys\n"
    "from kafkasim.cli import entry\n"
    "sys.argv = ['kafkasim', *sys.argv[1:]]\n"
    "try:\n"
    "    entry.main()\n"
    "except SystemExit:\n"
    "    pass\n"
    "from kafkasim.cli.main import VERBS\n"
    "names = set(VERBS.values()) | {'console'}\n"
    "print(' '.join(sorted(n for n in names if 'kafkasim.cli.' + n in sys.modules)))\n"
)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if a.dest == "command")
    return dict(action.choices)  # type: ignore[arg-type]


@pytest.mark.parametrize("verb", sorted(_LOADED))
def test_a_verbs_process_loads_no_other_verbs_module(verb: str) -> None:
    done = python("-c", _PROBE, "-v", verb, "--help")
    assert done.returncode == 0, done.stderr
    help_text, loaded = done.stdout.rsplit("\n", 2)[:2]
    assert f"usage: kafkasim {verb}" in help_text
    assert set(loaded.split()) == _LOADED[verb]


def test_the_full_help_lists_every_verb_in_the_tables_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert list(_subcommands(build_parser())) == list(VERBS)
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    printed = capsys.readouterr().out
    assert printed == build_parser().format_help()
    listed = [line.split()[0] for line in printed.splitlines() if line.startswith("    ")]
    assert [name for name in listed if name in VERBS] == list(VERBS)


@pytest.mark.parametrize(
    ("argv", "verb"),
    [
        (["broker", "--config", "x"], "broker"),
        (["-v", "topics", "--list"], "topics"),
        (["--verbose", "-v", "cluster", "up"], "cluster"),
        (["cluster", "-h"], "cluster"),
        ([], None),
        (["-v"], None),
        (["--help", "broker"], None),
        (["--version", "broker"], None),
        (["--", "broker"], None),
        (["--verb", "broker"], None),  # an abbreviation: left to the full parser
        (["nosuch"], None),
        (["--config", "broker"], None),
    ],
)
def test_the_verb_is_taken_only_where_its_parser_alone_parses_the_same(
    argv: list[str], verb: str | None
) -> None:
    assert verb_named(argv) == verb


@pytest.mark.parametrize("verb", list(VERBS))
def test_a_verb_parser_built_alone_is_the_one_built_among_all(verb: str) -> None:
    alone = build_parser([verb])
    assert list(_subcommands(alone)) == [verb]
    assert (
        _subcommands(alone)[verb].format_help() == _subcommands(build_parser())[verb].format_help()
    )


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[object, str, str]:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def test_errors_and_help_are_those_of_the_full_parser(capsys: pytest.CaptureFixture[str]) -> None:
    full = build_parser()
    for argv in (["broker", "--no-such-flag"], ["cluster", "nosuch"], ["-v", "topics", "-h"]):
        with pytest.raises(SystemExit) as expected_exit:
            full.parse_args(argv)
        expected = (expected_exit.value.code, *capsys.readouterr())
        assert _run(argv, capsys) == expected, argv


def test_an_unknown_verb_is_refused_with_every_verb_listed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = _run(["nosuch"], capsys)
    assert code == 2
    assert "invalid choice: 'nosuch'" in err
    assert all(repr(name) in err for name in VERBS)


def test_a_name_that_is_not_a_verb_is_refused_by_the_builder() -> None:
    with pytest.raises(ValueError, match="not verbs of kafkasim: nosuch"):
        build_parser(["broker", "nosuch"])
