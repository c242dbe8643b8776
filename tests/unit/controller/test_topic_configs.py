"""Incremental topic config changes as a pure function: the overrides after SET, DELETE,
APPEND and SUBTRACT, and Kafka's refusals naming the key (nothing is written on a refusal,
so the whole request is checked before the controller writes)."""

from __future__ import annotations

import pytest

from kafkasim.common.errors import InvalidConfigError, InvalidRequestError
from kafkasim.controller.topic_configs import AlterConfigOp, OpType, apply_incremental_ops

SET, DELETE, APPEND, SUBTRACT = (int(op) for op in OpType)


@pytest.mark.parametrize(
    ("current", "ops", "expected"),
    [
        ({}, [AlterConfigOp("retention.ms", SET, "1000")], {"retention.ms": "1000"}),
        (
            {"retention.ms": "1000", "segment.ms": "5"},
            [AlterConfigOp("retention.ms", DELETE)],
            {"segment.ms": "5"},
        ),
        ({}, [AlterConfigOp("retention.ms", DELETE)], {}),  # deleting an absent override
        # APPEND starts from the default (cleanup.policy=delete) when there is no override,
        # and does not repeat a value.
        (
            {},
            [AlterConfigOp("cleanup.policy", APPEND, "compact")],
            {"cleanup.policy": "delete,compact"},
        ),
        (
            {"cleanup.policy": "compact"},
            [AlterConfigOp("cleanup.policy", APPEND, "compact,delete")],
            {"cleanup.policy": "compact,delete"},
        ),
        (
            {"cleanup.policy": "compact,delete"},
            [AlterConfigOp("cleanup.policy", SUBTRACT, "delete")],
            {"cleanup.policy": "compact"},
        ),
        (
            {"min.insync.replicas": "2"},
            [AlterConfigOp("min.insync.replicas", DELETE), AlterConfigOp("flush.ms", SET, "10")],
            {"flush.ms": "10"},
        ),
    ],
)  # fmt: skip
def test_operations_give_the_new_overrides(
    current: dict[str, str], ops: list[AlterConfigOp], expected: dict[str, str]
) -> None:
    before = dict(current)
    assert apply_incremental_ops(current, ops) == expected
    assert current == before  # the input is left alone


@pytest.mark.parametrize(
    ("ops", "error", "match"),
    [
        ([AlterConfigOp("retention.mss", SET, "1")], InvalidConfigError, r"name: retention\.mss"),
        ([AlterConfigOp("no.such", DELETE)], InvalidConfigError, r"name: no\.such"),
        (
            [AlterConfigOp("retention.ms", SET, "soon")],
            InvalidConfigError,
            r"Invalid value 'soon' for configuration retention\.ms",
        ),
        (
            [AlterConfigOp("cleanup.policy", SET, "shred")],
            InvalidConfigError,
            r"shred for configuration cleanup\.policy",
        ),
        (
            [AlterConfigOp("min.compaction.lag.ms", SET, "10"),
             AlterConfigOp("max.compaction.lag.ms", SET, "5")],
            InvalidConfigError,
            r"min\.compaction\.lag\.ms \(10\) > max\.compaction\.lag\.ms \(5\)",
        ),
        (
            [AlterConfigOp("retention.ms", SET, "1"), AlterConfigOp("retention.ms", DELETE)],
            InvalidRequestError,
            r"duplicate config keys: retention\.ms",
        ),
        (
            [AlterConfigOp("retention.ms", APPEND, "1")],
            InvalidRequestError,
            r"append is not allowed for config key: retention\.ms",
        ),
        (
            [AlterConfigOp("retention.ms", SUBTRACT, "1")],
            InvalidRequestError,
            r"subtract is not allowed for config key: retention\.ms",
        ),
        (
            [AlterConfigOp("retention.ms", 7, "1")],
            InvalidRequestError,
            r"Unknown config operation 7 for config key: retention\.ms",
        ),
    ],
)  # fmt: skip
def test_refusals_name_the_key(
    ops: list[AlterConfigOp], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        apply_incremental_ops({}, ops)
