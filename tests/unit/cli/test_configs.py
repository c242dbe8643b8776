"""kafka-configs' flags as ``kafkasim configs`` reads them: Kafka's ``--add-config`` grammar
(brackets group a list value) and the flag combinations refused before anything is sent."""

from __future__ import annotations

import pytest

from kafkasim.cli.configs import ConfigCommandError, parse_add_config
from kafkasim.cli.main import main


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("retention.ms=1000", {"retention.ms": "1000"}),
        (
            "min.insync.replicas=2,cleanup.policy=[compact,delete],flush.ms=5",
            {"min.insync.replicas": "2", "cleanup.policy": "compact,delete", "flush.ms": "5"},
        ),
        (" retention.ms = 7 ,", {"retention.ms": "7"}),
        ("", {}),
    ],
)
def test_add_config_pairs_split_on_commas_outside_brackets(
    text: str, expected: dict[str, str]
) -> None:
    assert parse_add_config(text) == expected


@pytest.mark.parametrize("text", ["retention.ms", "=5", "a=1,b"])
def test_a_pair_without_key_and_value_is_refused(text: str) -> None:
    with pytest.raises(ConfigCommandError, match='format "key=val"'):
        parse_add_config(text)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--entity-type", "topics", "--entity-name", "t"], "exactly one action"),
        (["--alter", "--describe", "--topic", "t"], "exactly one action"),
        (["--describe"], "At least one entity type must be specified"),
        (["--describe", "--entity-type", "clients"], "Invalid entity type clients"),
        (["--describe", "--entity-type", "brokers", "--entity-name", "b1"], "valid integer"),
        (["--describe", "--topic", "t", "--entity-default"], "only valid with --entity-type"),
        (["--alter", "--entity-type", "brokers", "--add-config", "a=1"], "--entity-default"),
        (["--alter", "--topic", "t", "--add-config", "a=1", "--all"], "--all is only valid"),
        (["--alter", "--entity-type", "topics", "--add-config", "a=1"], "entity name must"),
        (["--alter", "--topic", "t"], "At least one of --add-config"),
        (["--describe", "--topic", "t", "--delete-config", "a"], "only valid with --alter"),
        (["--describe", "--topic", "t", "--entity-name", "t"], "not several"),
    ],
)
def test_bad_flag_combinations_print_one_line_and_exit_1(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["configs", "--bootstrap-server", "127.0.0.1:1", *args]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
