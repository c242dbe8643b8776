"""``kafkasim transactions`` against a fake admin: Kafka's tables (headers, padding, the
trailing tab of prettyPrintTable, None and -1 where Kafka prints them), both command forms,
and Kafka's one-line failures."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Sequence

import pytest

from kafkasim.cli.main import build_parser
from kafkasim.cli.transactions import CommandFailedError, command_of, execute
from kafkasim.client.admin_txn import ProducerState, TransactionDescription, TransactionListing
from kafkasim.common.errors import NotLeaderOrFollowerError, TransactionalIdNotFoundError
from kafkasim.common.types import TopicPartition

TP = TopicPartition("events", 0)


class FakeAdmin:
    def __init__(self) -> None:
        self.asked: list[tuple[str, object]] = []

    async def describe_producers(
        self, partitions: Sequence[TopicPartition], *, broker_id: int | None = None
    ) -> dict[TopicPartition, list[ProducerState]]:
        self.asked.append(("producers", broker_id))
        if broker_id == 3:
            raise NotLeaderOrFollowerError("partition events-0: Broker 3 holds no replica")
        return {
            TP: [
                ProducerState(1000, 0, 4, 1700000000000, None, 12),
                ProducerState(2, 15, 9, 1700000000001, 3, None),
            ]
        }

    async def list_transactions(self) -> dict[int, list[TransactionListing]]:
        return {
            2: [TransactionListing("payments", 7, "CompleteCommit")],
            1: [TransactionListing("app", 3000, "Ongoing")],
        }

    async def describe_transactions(
        self, transactional_ids: Sequence[str]
    ) -> list[TransactionDescription]:
        (tid,) = transactional_ids
        if tid == "app":
            return [
                TransactionDescription(
                    1, "Ongoing", 3000, 2, 60000, 1000, (TP, TopicPartition("events", 2))
                )
            ]
        if tid == "idle":
            return [TransactionDescription(1, "Empty", 5, 0, 60000, None, ())]
        raise TransactionalIdNotFoundError(f"TransactionalId {tid} not found")


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["transactions", "--bootstrap-server", "x:1", *argv])


def run(*argv: str, admin: FakeAdmin | None = None) -> list[str]:
    args = parse(*argv)
    return asyncio.run(execute(command_of(args), args, admin or FakeAdmin(), now_ms=1500))


def test_describe_producers_prints_kafkas_table() -> None:
    lines = run("--describe-producers", "--topic", "events", "--partition", "0")
    assert lines == [
        "ProducerId\tProducerEpoch\tLatestCoordinatorEpoch\tLastSequence\tLastTimestamp\t"
        "CurrentTransactionStartOffset\t",
        "1000      \t0            \t-1                    \t4           \t1700000000000\t"
        "12                           \t",
        "2         \t15           \t3                     \t9           \t1700000000001\t"
        "None                         \t",
    ]


def test_kafkas_command_form_is_the_same_as_the_flag() -> None:
    assert run("describe-producers", "--topic", "events", "--partition", "0") == run(
        "--describe-producers", "--topic", "events", "--partition", "0"
    )
    assert run("list") == run("--list")


def test_describe_producers_on_a_broker_names_it_when_it_fails() -> None:
    admin = FakeAdmin()
    with pytest.raises(CommandFailedError) as caught:
        run(
            "--describe-producers",
            "--topic",
            "events",
            "--partition",
            "0",
            "--broker-id",
            "3",
            admin=admin,
        )
    assert str(caught.value) == (
        "Failed to describe producers for partition events-0 on broker 3: "
        "NOT_LEADER_OR_FOLLOWER: partition events-0: Broker 3 holds no replica."
    )
    assert admin.asked == [("producers", 3)]


def test_list_prints_every_brokers_transactions() -> None:
    assert run("--list") == [
        "TransactionalId\tCoordinator\tProducerId\tTransactionState\t",
        "app            \t1          \t3000      \tOngoing         \t",
        "payments       \t2          \t7         \tCompleteCommit  \t",
    ]


def test_describe_prints_the_transaction_and_its_duration() -> None:
    lines = run("--describe", "--transactional-id", "app")
    assert [h.strip() for h in lines[0].split("\t")[:-1]] == [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    ]
    assert [v.strip() for v in lines[1].split("\t")[:-1]] == [
        "1",
        "app",
        "3000",
        "2",
        "Ongoing",
        "60000",
        "1000",
        "500",
        "events-0,events-2",
    ]


def test_describe_without_an_open_transaction_prints_none() -> None:
    lines = run("describe", "--transactional-id", "idle")
    assert [v.strip() for v in lines[1].split("\t")[:-1]] == [
        "1",
        "idle",
        "5",
        "0",
        "Empty",
        "60000",
        "None",
        "None",
        "",
    ]


def test_an_unknown_transactional_id_is_one_line_naming_it() -> None:
    with pytest.raises(CommandFailedError) as caught:
        run("--describe", "--transactional-id", "ghost")
    assert str(caught.value) == (
        "Failed to describe transaction state of transactional-id `ghost`: "
        "TRANSACTIONAL_ID_NOT_FOUND: TransactionalId ghost not found."
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "exactly one action"),
        (("--list", "--describe"), "exactly one action"),
        (("list", "--describe"), "exactly one action"),
        (("--describe",), "--describe requires --transactional-id"),
        (("--describe-producers", "--topic", "t"), "requires --topic and --partition"),
    ],
)
def test_bad_usage_names_what_is_wrong(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        command_of(parse(*argv))
