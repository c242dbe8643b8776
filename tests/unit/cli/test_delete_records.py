"""kafka-delete-records' offset JSON file: Kafka's format accepted, anything else refused with
one line that says what is wrong (before anything is sent to a cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkasim.cli.delete_records import OffsetJsonError, parse_offset_json, read_offset_json
from kafkasim.common.types import TopicPartition


def test_kafkas_format_is_read_in_file_order_and_version_defaults_to_1() -> None:
    text = (
        '{"partitions":[{"topic":"t","partition":1,"offset":-1},'
        '{"topic":"t","partition":0,"offset":5}],"version":1}'
    )
    assert list(parse_offset_json(text).items()) == [
        (TopicPartition("t", 1), -1),
        (TopicPartition("t", 0), 5),
    ]
    assert parse_offset_json('{"partitions":[{"topic":"u","partition":0,"offset":0}]}') == {
        TopicPartition("u", 0): 0
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"version":2,"partitions":[]}', "Not supported version field value 2"),
        ('{"version":1}', 'no "partitions" list'),
        ('{"partitions":[]}', "lists no partitions"),
        ('{"partitions":[{"topic":"t","partition":"0","offset":1}]}', r"partitions\[0\] must be"),
        ('{"partitions":[{"topic":"t","partition":0}]}', r"partitions\[0\] must be"),
        (
            '{"partitions":[{"topic":"t","partition":0,"offset":1},'
            '{"topic":"t","partition":0,"offset":2}]}',
            "duplicate topic partitions: t-0",
        ),
    ],
)
def test_malformed_files_are_refused_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(OffsetJsonError, match=message):
        parse_offset_json(text)


def test_a_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(OffsetJsonError, match=r"cannot read the offset JSON file .*nope\.json"):
        read_offset_json(tmp_path / "nope.json")
