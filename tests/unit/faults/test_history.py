"""The JSON objects a history writes for its ops and samples: every field by name, optional ones
only when set, tuples as lists (the byte-for-byte form replays and ``kafkasim check`` read)."""

from __future__ import annotations

import json

from kafkasim.faults.history import History, Op, OpType, ReplicaSample


def test_an_op_is_written_field_by_field_with_optional_fields_only_when_set() -> None:
    plain = Op(OpType.OK, "send", "producer-1", 12, "t", 0, "v1", offset=3)
    assert plain.record() == {
        "type": "ok", "f": "send", "process": "producer-1", "time_ms": 12, "topic": "t",
        "partition": 0, "value": "v1", "offset": 3, "hw": None, "error": None,
        "idempotent": False, "acks": "all",
    }  # fmt: skip
    txn = Op(OpType.INVOKE, "send", "p", 1, "t", 0, "v", txn="tx:0", isolation=None)
    assert txn.record()["txn"] == "tx:0"
    assert "isolation" not in txn.record() and "group" not in txn.record()


def test_a_sample_is_written_with_lists_and_without_an_unknown_fetched_epoch() -> None:
    sample = ReplicaSample(5, 2, "t", 0, False, 1, 3, 10, 12, (1, 2), (1, 2, 3))
    assert sample.record() == {
        "time_ms": 5, "broker": 2, "topic": "t", "partition": 0, "is_leader": False,
        "leader": 1, "leader_epoch": 3, "high_watermark": 10, "log_end_offset": 12,
        "isr": (1, 2), "replicas": (1, 2, 3),
    }  # fmt: skip
    known = ReplicaSample(5, 2, "t", 0, False, 1, 3, 10, 12, (1, 2), (1, 2, 3), 3)
    h = History(samples=[known])
    line = json.loads(list(h.lines())[1])
    assert line["isr"] == [1, 2] and line["fetched_leader_epoch"] == 3
    assert History.parse(h.lines()).samples == [known]
