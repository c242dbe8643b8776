"""The partition state machine on its own: its transition table, and the leader/ISR changes it
makes on a hand-made term (SimZooKeeper, a context, a recording transport)."""

from __future__ import annotations

import logging

import pytest

from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.channel import RequestBatch
from kafkasim.controller.partition_state_machine import (
    VALID_PREVIOUS_STATES,
    PartitionState,
    PartitionStateMachine,
    is_valid_transition,
)
from kafkasim.controller.zk_data import LeaderAndIsr

from .harness import run
from .term_bench import TermBench, bump_controller_epoch, term_bench

NON_EXISTENT = PartitionState.NON_EXISTENT
NEW = PartitionState.NEW
ONLINE = PartitionState.ONLINE
OFFLINE = PartitionState.OFFLINE
T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


@pytest.mark.parametrize(
    ("current", "target", "valid"),
    [
        (NON_EXISTENT, NEW, True),
        (NON_EXISTENT, ONLINE, False),
        (NON_EXISTENT, OFFLINE, False),
        (NEW, ONLINE, True),
        (NEW, OFFLINE, True),
        (NEW, NEW, False),
        (NEW, NON_EXISTENT, False),
        (ONLINE, ONLINE, True),
        (ONLINE, OFFLINE, True),
        (ONLINE, NEW, False),
        (ONLINE, NON_EXISTENT, False),
        (OFFLINE, ONLINE, True),
        (OFFLINE, OFFLINE, True),
        (OFFLINE, NON_EXISTENT, True),
        (OFFLINE, NEW, False),
    ],
)
def test_transition_table_is_kafkas(
    current: PartitionState, target: PartitionState, valid: bool
) -> None:
    assert is_valid_transition(current, target) is valid


def test_every_state_has_valid_previous_states() -> None:
    assert set(VALID_PREVIOUS_STATES) == set(PartitionState)
    assert PartitionState.ONLINE.value == "OnlinePartition"


def test_illegal_transition_is_logged_and_leaves_the_state(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> tuple[list[TopicPartition], PartitionState, PartitionState]:
        bench = await term_bench([1], {"t": {0: [1], 1: [1]}})
        psm = PartitionStateMachine(bench.term)
        psm.add_new([T0, T1])
        psm.transition([T1], OFFLINE)
        moved = psm.transition([T0, T1], NON_EXISTENT)  # New -> NonExistent is illegal
        await bench.close()
        return moved, psm.state(T0), psm.state(T1)

    with caplog.at_level(logging.ERROR, logger="controller.controller"):
        moved, s0, s1 = run(scenario)
    assert (moved, s0, s1) == ([T1], NEW, NON_EXISTENT)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "t-0" in errors[0] and "NewPartition" in errors[0]
    assert "NonExistentPartition" in errors[0] and "OfflinePartition" in errors[0]
    caplog.clear()  # the error was the point of this test


def test_initialize_creates_the_state_znode_and_goes_online() -> None:
    async def scenario() -> None:
        bench = await term_bench([1, 2], {"t": {0: [2, 1, 3]}})
        psm = PartitionStateMachine(bench.term)
        psm.add_new([T0])
        batch = RequestBatch()
        await psm.initialize([T0], batch)
        bench.term.send(batch)
        state = await bench.state(T0)
        assert (state.leader, state.isr, state.leader_epoch) == (2, (2, 1), 0)
        assert state.controller_epoch == bench.term.ctx.epoch
        assert psm.state(T0) is ONLINE
        transport = await bench.sent()
        [request] = transport.leader_and_isr(2)
        assert [(s.partition, s.leader, s.is_new) for s in request.partition_states] == [
            (0, 2, True)
        ]
        assert transport.leader_and_isr(1) and transport.update_metadata(1)
        await bench.close()

    run(scenario)


def test_partition_without_live_replica_stays_new() -> None:
    async def scenario() -> None:
        bench = await term_bench([1], {"t": {0: [2, 3]}})
        psm = PartitionStateMachine(bench.term)
        psm.add_new([T0])
        batch = RequestBatch()
        await psm.initialize([T0], batch)
        assert psm.state(T0) is NEW
        assert batch.is_empty()
        assert await bench.zk.exists(zk_data.partition_state_path(T0)) is None
        await bench.close()

    run(scenario)


async def _with_state(
    live: list[int], replicas: list[int], state: LeaderAndIsr
) -> tuple[TermBench, PartitionStateMachine]:
    """Partition t-0 on ``replicas`` with ``state`` in ZooKeeper, as a failover finds it."""
    bench = await term_bench(live, {"t": {0: replicas}})
    psm = PartitionStateMachine(bench.term)
    psm.add_new([T0])
    await bench.write_state(T0, state)
    psm.initialize_states()
    return bench, psm


def test_offline_election_picks_a_live_isr_member_with_the_next_epoch() -> None:
    async def scenario() -> None:
        bench, psm = await _with_state([2, 3], [1, 2, 3], LeaderAndIsr(1, 4, (1, 3), 0))
        assert psm.state(T0) is OFFLINE  # its leader, broker 1, is not live
        batch = RequestBatch()
        results = await psm.elect_offline([T0], batch)
        assert results[T0].elected
        state = await bench.state(T0)
        assert (state.leader, state.isr, state.leader_epoch) == (3, (3,), 5)
        assert psm.state(T0) is ONLINE
        assert bench.term.ctx.leadership[T0] == state
        await bench.close()

    run(scenario)


def test_offline_election_without_live_isr_member_stays_offline() -> None:
    async def scenario() -> None:
        bench, psm = await _with_state([2], [1, 2], LeaderAndIsr(1, 4, (1,), 0))
        results = await psm.elect_offline([T0], RequestBatch())
        assert not results[T0].elected
        assert psm.state(T0) is OFFLINE
        assert (await bench.state(T0)).leader == 1  # nothing written: unclean is off
        await bench.close()

    run(scenario)


def test_election_decides_on_the_state_znode_not_the_cached_state() -> None:
    async def scenario() -> None:
        bench, psm = await _with_state([2, 3], [1, 2, 3], LeaderAndIsr(1, 4, (1, 2, 3), 0))
        # The leader shrank the ISR after the controller's picture was taken.
        current = await bench.state(T0)
        await bench.zk.zk.set(
            zk_data.partition_state_path(T0),
            zk_data.encode_partition_state(current.with_(isr=(1, 3))),
            current.zk_version,
        )
        await psm.elect_offline([T0], RequestBatch())
        state = await bench.state(T0)
        assert (state.leader, state.isr, state.leader_epoch) == (3, (3,), 5)
        await bench.close()

    run(scenario)


def test_removing_the_last_isr_leader_leaves_the_partition_offline() -> None:
    async def scenario() -> None:
        bench, psm = await _with_state([2], [1, 2], LeaderAndIsr(1, 4, (1,), 0))
        await psm.remove_replica_from_isr([T0], 1, RequestBatch())
        state = await bench.state(T0)
        assert (state.leader, state.isr, state.leader_epoch) == (zk_data.NO_LEADER, (1,), 5)
        assert psm.state(T0) is OFFLINE
        await bench.close()

    run(scenario)


def test_a_zombie_cannot_initialize_a_partition() -> None:
    async def scenario() -> None:
        bench = await term_bench([1], {"t": {0: [1]}})
        psm = PartitionStateMachine(bench.term)
        psm.add_new([T0])
        await bump_controller_epoch(bench)
        with pytest.raises(Exception, match="stale"):
            await psm.initialize([T0], RequestBatch())
        assert psm.state(T0) is NEW
        assert await bench.zk.exists(zk_data.partition_state_path(T0)) is None
        await bench.close()

    run(scenario)


def test_deletion_moves_partitions_to_non_existent() -> None:
    async def scenario() -> None:
        bench = await term_bench([1], {"t": {0: [1]}})
        psm = PartitionStateMachine(bench.term)
        psm.add_new([T0])
        await psm.initialize([T0], RequestBatch())
        psm.to_non_existent([T0])
        assert psm.state(T0) is NON_EXISTENT
        await bench.close()

    run(scenario)
