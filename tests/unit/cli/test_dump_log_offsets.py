"""``kafkasim dump-log --offsets-decoder``: ``__consumer_offsets`` records printed decoded, the
way Kafka's DumpLogSegments prints them, run as a user runs it."""

from __future__ import annotations

import functools
from pathlib import Path

from kafkasim.common.group_protocol import Assignment, encode_assignment
from kafkasim.common.types import TopicPartition
from kafkasim.node.group_records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from kafkasim.storage.records.batch import RecordBatchBuilder
from kafkasim.storage.records.legacy import encode_legacy
from tests.cli_run import kafkasim
from tests.unit.storage.logtools import T0

run = functools.partial(kafkasim, timeout=120)


def _member(member_id: str, assignment: bytes) -> MemberValue:
    return MemberValue(member_id, None, "client", "/127.0.0.1", 300_000, 10_000, b"", assignment)


CONSUMER_GROUP = GroupValue(
    protocol_type="consumer",
    generation=3,
    protocol="range",
    leader="m1",
    current_state_timestamp=T0,
    members=(
        _member(
            "m1", encode_assignment(Assignment((TopicPartition("t", 1), TopicPartition("t", 0))))
        ),
        _member("m2", encode_assignment(Assignment((TopicPartition("t", 2),), b"\x00\x1f"))),
    ),
)
OTHER_GROUP = GroupValue("connect", 1, "default", "w1", -1, (_member("w1", b"\x0a\xbc"),))

EXPECTED = [
    "key: offset_commit::group=g,partition=t-0 payload: offset=5",
    "key: offset_commit::group=g,partition=t-1 payload: offset=7,metadata=meta",
    "key: group_metadata::group=g payload: "
    '{"protocolType":"consumer","protocol":"range","generationId":3,'
    '"assignment":"{m1=[t-0, t-1],m2=[t-2]:1F}"}',
    "key: group_metadata::group=c payload: "
    '{"protocolType":"connect","protocol":"default","generationId":1,"assignment":"{w1=ABC}"}',
    "key: offset_commit::group=g,partition=t-0 payload: <DELETE>",
    "key: group_metadata::group=g payload: <DELETE>",
]


def test_dump_log_offsets_decoder_prints_kafkas_offsets_lines(tmp_path: Path) -> None:
    partition = tmp_path / "__consumer_offsets-0"
    partition.mkdir()
    builder = RecordBatchBuilder()
    records: list[tuple[bytes | None, bytes | None]] = [
        (encode_offset_key(OffsetKey("g", "t", 0)), encode_offset_value(OffsetValue(5, 2, "", T0))),
        (
            encode_offset_key(OffsetKey("g", "t", 1)),
            encode_offset_value(OffsetValue(7, -1, "meta", T0)),
        ),
        (encode_group_key(GroupKey("g")), encode_group_value(CONSUMER_GROUP)),
        (encode_group_key(GroupKey("c")), encode_group_value(OTHER_GROUP)),
        (encode_offset_key(OffsetKey("g", "t", 0)), None),
        (encode_group_key(GroupKey("g")), None),
        (b"\x00\x07garbage", b"x"),
        (None, b"no key"),
    ]
    for key, value in records:
        builder.append(T0, key, value)
    segment = partition / "00000000000000000000.log"
    segment.write_bytes(builder.build())
    # An old broker wrote __consumer_offsets in the legacy formats; the decoder reads them too.
    legacy = partition / "00000000000000000100.log"
    legacy.write_bytes(
        encode_legacy(
            [(T0, encode_offset_key(OffsetKey("old", "t", 3)), encode_offset_value(
                OffsetValue(42, -1, "", T0, expire_timestamp=T0 + 1)
            ))],
            magic=1,
            base_offset=100,
        )
    )  # fmt: skip

    out = run("dump-log", "--offsets-decoder", "--files", f"{segment},{legacy}")

    assert out.returncode == 0, out.stderr
    records_out = [line for line in out.stdout.splitlines() if line.startswith("| offset: ")]
    assert len(records_out) == 9
    for line, expected in zip(records_out[: len(EXPECTED)], EXPECTED, strict=True):
        assert line.endswith(" " + expected), line
    assert records_out[0].startswith("| offset: 0 CreateTime: 1700000000000 keysize: ")
    assert records_out[6].endswith(
        " key: Error at offset 6, skipping. "
        "__consumer_offsets key: unknown group metadata message version 7"
    )
    assert records_out[7].endswith(
        " key: Error at offset 7, skipping. "
        "Failed to decode message using offset topic decoder (message had a missing key)"
    )
    assert records_out[8].startswith("| offset: 100 CreateTime: 1700000000000 ")
    assert records_out[8].endswith(
        " key: offset_commit::group=old,partition=t-3 payload: offset=42"
    )


def test_without_the_decoder_the_same_records_print_as_text(tmp_path: Path) -> None:
    segment = tmp_path / "00000000000000000000.log"
    builder = RecordBatchBuilder()
    builder.append(T0, encode_group_key(GroupKey("g")), None)
    segment.write_bytes(builder.build())
    out = run("dump-log", "--print-data-log", "--files", str(segment))
    assert out.returncode == 0, out.stderr
    assert "group_metadata::" not in out.stdout
    assert "payload: null" in out.stdout
