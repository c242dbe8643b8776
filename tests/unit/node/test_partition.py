"""One partition replica: DeleteRecords on the leader and its low-watermark purgatory.

Why: a DeleteRecords answer promises that every live replica has dropped the records, so the
leader must hold it until the followers' fetches report their new log start offsets, and
refuse what Kafka refuses (followers, compacted topics, offsets past the HW).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from kafkasim.common.clock import ManualClock
from kafkasim.common.errors import NotLeaderOrFollowerError, OffsetOutOfRangeError, error_for_name
from kafkasim.common.types import TopicPartition
from kafkasim.node.partition import WAKE_ON_HIGH_WATERMARK, WAKE_ON_LOG_END, Partition
from kafkasim.node.purgatory import DelayedDeleteRecords, PartitionWait
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log import Log
from tests.unit.node.looptools import turns
from tests.unit.storage.logtools import T0, make_batch

PolicyViolationError = error_for_name("POLICY_VIOLATION")
TP = TopicPartition("topic", 0)
NOW_MS = 1_000


def leader(
    tmp_path: Path, dead: frozenset[int] = frozenset(), props: dict[str, object] | None = None
) -> Partition:
    """Broker 1 leading with followers 2 and 3 in the ISR and 5 records, all replicated."""
    log = Log.open(
        tmp_path / "topic-0", LogConfig.from_props(props), ManualClock(T0), topic_partition=TP
    )
    partition = Partition(TP, 1, log, is_broker_alive=lambda b: b not in dead)
    partition.make_leader(
        leader_epoch=1, isr=[1, 2, 3], replicas=[1, 2, 3], zk_version=0, controller_epoch=1,
        now_ms=NOW_MS,
    )  # fmt: skip
    values = [b"a", b"b", b"c", b"d", b"e"]
    partition.append_records_to_leader(make_batch(values, keys=values), 1)
    for follower in (2, 3):
        partition.record_follower_fetch(follower, 5, NOW_MS, log_start_offset=0)
    assert partition.high_watermark == 5
    return partition


def run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


async def park(partition: Partition, offset: int) -> tuple[asyncio.Task[None], PartitionWait]:
    """A DeleteRecords of ``offset`` parked in the partition's purgatory."""
    wait = PartitionWait(partition, offset)
    op = DelayedDeleteRecords([wait], timeout_ms=30_000)
    task = asyncio.create_task(partition.delayed.delete_records.try_complete_else_watch(op))
    await asyncio.sleep(0)
    return task, wait


def test_delete_moves_the_leaders_start_and_waits_for_every_follower(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = leader(tmp_path)
        assert partition.delete_records_on_leader(3) == 3
        assert partition.log.log_start_offset == 3
        assert partition.low_watermark == 0
        done, wait = await park(partition, 3)
        partition.record_follower_fetch(2, 5, NOW_MS, log_start_offset=3)
        await turns()
        assert not done.done() and partition.low_watermark == 0
        partition.record_follower_fetch(3, 5, NOW_MS, log_start_offset=3)
        await turns()
        assert done.done() and wait.done and wait.error is None
        assert partition.low_watermark == 3

    run(scenario())


def test_minus_one_means_the_high_watermark(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = leader(tmp_path)
        assert partition.delete_records_on_leader(-1) == 5
        assert partition.log.log_start_offset == 5

    run(scenario())


def test_a_follower_on_a_dead_broker_does_not_hold_the_low_watermark(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = leader(tmp_path, dead=frozenset({3}))
        partition.delete_records_on_leader(2)
        done, _ = await park(partition, 2)
        partition.record_follower_fetch(2, 5, NOW_MS, log_start_offset=2)
        await turns()
        assert done.done()

    run(scenario())


@pytest.mark.parametrize(
    ("offset", "error", "match"),
    [
        (6, OffsetOutOfRangeError, "larger than the high watermark 5"),
        (-2, OffsetOutOfRangeError, "The offset -2 for partition topic-0 is not valid"),
    ],
)
def test_offsets_outside_zero_to_the_hw_are_out_of_range(
    tmp_path: Path, offset: int, error: type[Exception], match: str
) -> None:
    async def scenario() -> None:
        partition = leader(tmp_path)
        with pytest.raises(error, match=match):
            partition.delete_records_on_leader(offset)
        assert partition.log.log_start_offset == 0

    run(scenario())


def test_a_topic_without_the_delete_policy_refuses_with_policy_violation(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = leader(tmp_path, props={"cleanup.policy": "compact"})
        with pytest.raises(PolicyViolationError, match="topic-0 can not be deleted"):
            partition.delete_records_on_leader(1)

    run(scenario())


def test_a_follower_refuses_and_losing_leadership_fails_parked_deletes(tmp_path: Path) -> None:
    async def scenario() -> None:
        partition = leader(tmp_path)
        partition.delete_records_on_leader(2)
        parked, wait = await park(partition, 2)
        partition.make_follower(
            leader_id=2, leader_epoch=2, isr=[1, 2, 3], replicas=[1, 2, 3], zk_version=1,
            controller_epoch=1,
        )  # fmt: skip
        await turns()
        assert parked.done() and isinstance(wait.error, NotLeaderOrFollowerError)
        with pytest.raises(NotLeaderOrFollowerError):
            partition.delete_records_on_leader(3)
        with pytest.raises(NotLeaderOrFollowerError):
            _ = partition.low_watermark

    run(scenario())


def test_a_follower_fetch_computes_the_hw_again_only_when_the_followers_leo_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's updateFollowerFetchState: the same fetch offset again changes nothing the HW
    depends on, so the HW is not computed (nor parked DeleteRecords checked) per such fetch."""

    async def scenario() -> None:
        partition = leader(tmp_path)
        partition.append_records_to_leader(make_batch([b"f"]), 1)
        computed: list[int] = []
        checked: list[int] = []
        increment = partition.maybe_increment_high_watermark
        check_deletes = partition.maybe_complete_delete_records

        def counting_increment() -> bool:
            computed.append(partition.high_watermark)
            return increment()

        def counting_check() -> None:
            checked.append(partition.high_watermark)
            check_deletes()

        monkeypatch.setattr(partition, "maybe_increment_high_watermark", counting_increment)
        monkeypatch.setattr(partition, "maybe_complete_delete_records", counting_check)
        partition.record_follower_fetch(2, 5, NOW_MS, log_start_offset=0)
        assert computed == [] and checked == []
        partition.record_follower_fetch(2, 6, NOW_MS, log_start_offset=0)
        assert computed == [5] and checked == []  # 3 still at 5: the HW stays
        partition.record_follower_fetch(3, 6, NOW_MS, log_start_offset=0)
        assert computed == [5, 5] and checked == [6] and partition.high_watermark == 6
        partition.record_follower_fetch(3, 6, NOW_MS, log_start_offset=2)
        assert computed == [5, 5] and checked == [6, 6]  # its start moved: deletes checked

    run(scenario())


def test_watched_data_wakes_by_what_moved_and_drops_fetches_answered_otherwise(
    tmp_path: Path,
) -> None:
    """A follower's watch (the log end) is not woken by a HW move nor a consumer's (the HW) by
    an append the HW does not follow; a stop wakes both. Watches whose fetch ended another way
    (its timeout) do not pile up on a partition that nothing wakes."""

    async def scenario() -> None:
        partition = leader(tmp_path)
        loop = asyncio.get_running_loop()
        follower, consumer = loop.create_future(), loop.create_future()
        partition.watch_data(follower, WAKE_ON_LOG_END)
        partition.watch_data(consumer, WAKE_ON_HIGH_WATERMARK)
        partition.append_records_to_leader(make_batch([b"f"]), 1)  # LEO 6, the HW stays 5
        await turns()
        assert follower.done() and not consumer.done()
        partition.watch_data(follower := loop.create_future(), WAKE_ON_LOG_END)
        for replica in (2, 3):
            partition.record_follower_fetch(replica, 6, NOW_MS)
        await turns()
        assert partition.high_watermark == 6 and consumer.done() and not follower.done()
        partition.fail_waiters(NotLeaderOrFollowerError("stopped"))
        await turns()
        assert follower.done()
        for _ in range(100):  # fetches that timed out: their futures are done
            answered = loop.create_future()
            partition.watch_data(answered, WAKE_ON_HIGH_WATERMARK)
            answered.cancel()
        assert len(partition._data_waiters) <= 8

    run(scenario())
