"""consumer-groups' offline parts: ``--members --verbose``'s ASSIGNMENT column, the reset's
argument checks in Kafka's words, its time and duration formats and its CSV file.

Why: these are what a Kafka user types and reads; a wrong format must be refused naming it
before anything reaches a broker."""

from __future__ import annotations

import argparse
from datetime import timedelta
from pathlib import Path

import pytest

from kafkasim.cli.consumer_groups import _members
from kafkasim.cli.consumer_groups_reset import (
    ResetError,
    parse_datetime,
    parse_duration,
    read_plan_file,
)
from kafkasim.cli.main import build_parser
from kafkasim.client.admin_groups import GroupDescription, MemberDescription
from kafkasim.common.types import TopicPartition


def test_verbose_members_adds_each_members_assignment() -> None:
    tps = (TopicPartition("a", 1), TopicPartition("b", 0), TopicPartition("a", 0))
    members = (
        MemberDescription("m-1", "c1", "/127.0.0.1", tps),
        MemberDescription("m-2", "c2", "/127.0.0.1", ()),
    )
    group = GroupDescription("g", "Stable", "consumer", "range", members, 1)
    lines = _members(group, verbose=True)
    assert lines[1].split() == [
        "GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT",
    ]  # fmt: skip
    assert lines[2].split() == ["g", "m-1", "/127.0.0.1", "c1", "3", "a(0,1),b(0)"]
    assert lines[3].split() == ["g", "m-2", "/127.0.0.1", "c2", "0", "-"]
    assert _members(group)[1].split()[-1] == "#PARTITIONS"


def test_durations_and_datetimes_in_kafkas_formats() -> None:
    assert parse_duration("PT15M") == timedelta(minutes=15)
    assert parse_duration("P1DT2H3.5S") == timedelta(days=1, hours=2, seconds=3.5)
    assert parse_datetime("2024-05-01T09:00:00.000Z").isoformat() == "2024-05-01T09:00:00+00:00"
    assert parse_datetime("2024-05-01T09:00:00+02:00").utcoffset() == timedelta(hours=2)
    assert parse_datetime("2024-05-01T09:00:00").tzinfo is not None  # the local zone
    for bad in ("PT", "15m", "P-1D"):
        with pytest.raises(ValueError, match="Error parsing duration"):
            parse_duration(bad)
    for bad in ("2024-05-01", "yesterday"):
        with pytest.raises(ValueError, match="Error parsing timestamp"):
            parse_datetime(bad)


def test_the_csv_file_takes_either_form_and_names_a_bad_line(tmp_path: Path) -> None:
    one = tmp_path / "one.csv"
    one.write_text("t,0,5\nt,1,7\n")
    assert read_plan_file(one) == {"": {TopicPartition("t", 0): 5, TopicPartition("t", 1): 7}}
    several = tmp_path / "several.csv"
    several.write_text("g1,t,0,5\ng2,t,0,6\n")
    assert read_plan_file(several) == {
        "g1": {TopicPartition("t", 0): 5},
        "g2": {TopicPartition("t", 0): 6},
    }
    bad = tmp_path / "bad.csv"
    bad.write_text("t,0,5\nt,zero,5\n")
    with pytest.raises(ResetError, match=r"bad.csv:2: expected topic,partition,offset"):
        read_plan_file(bad)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--to-earliest"], "One of the reset scopes should be defined"),
        (["--all-topics"], "takes one of these options"),
        (["--all-topics", "--to-latest", "--execute", "--dry-run"], "only one of --execute"),
        (["--topic", "t", "--to-datetime", "noon"], "Error parsing timestamp"),
        (["--from-file", "f.csv", "--all-topics"], "takes its partitions from the file"),
    ],
)
def test_reset_flags_are_checked_before_any_request(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from kafkasim.cli.main import main

    argv = ["consumer-groups", "--bootstrap-server", "127.0.0.1:1", "--reset-offsets"]
    assert main([*argv, "--group", "g", *args]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_the_group_verbose_flag_leaves_the_logging_flag_alone() -> None:
    parsed = build_parser().parse_args(["-v", "consumer-groups", "--list"])
    assert isinstance(parsed, argparse.Namespace)
    assert (parsed.verbose, parsed.group_verbose) == (True, False)
