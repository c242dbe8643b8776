"""The fenced ZooKeeper writer on its own: every write conditional on the controller epoch
znode's version, partition state reads that detect a newer controller."""

from __future__ import annotations

import pytest

from kafkasim.common.coordination import BadVersionError, CreateOp, SetOp
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.api import ControllerMovedError
from kafkasim.controller.zk_data import LeaderAndIsr

from .harness import run
from .term_bench import bump_controller_epoch, term_bench

T0 = TopicPartition("t", 0)


def test_fenced_write_applies_while_the_epoch_znode_is_unchanged() -> None:
    async def scenario() -> None:
        bench = await term_bench([1])
        await bench.term.zk.fenced([CreateOp("/x", b"1")])
        assert (await bench.zk.get("/x"))[0] == b"1"
        assert await bench.term.zk.fenced_delete("/x")
        assert not await bench.term.zk.fenced_delete("/x")  # already gone
        await bench.close()

    run(scenario)


def test_a_zombie_writes_nothing_and_learns_it_moved() -> None:
    async def scenario() -> None:
        bench = await term_bench([1])
        await bump_controller_epoch(bench)
        with pytest.raises(ControllerMovedError, match="stale"):
            await bench.term.zk.fenced([CreateOp("/x", b"1")])
        assert await bench.zk.exists("/x") is None
        await bench.close()

    run(scenario)


def test_a_conflicting_op_is_its_own_error_not_a_move() -> None:
    async def scenario() -> None:
        bench = await term_bench([1])
        await bench.zk.create("/x", b"1")
        with pytest.raises(BadVersionError):
            await bench.term.zk.fenced([SetOp("/x", b"2", 7)])
        assert (await bench.zk.get("/x"))[0] == b"1"
        await bench.close()

    run(scenario)


def test_partition_state_written_with_the_version_read() -> None:
    async def scenario() -> None:
        bench = await term_bench([1, 2], {"t": {0: [1, 2]}})
        await bench.write_state(T0, LeaderAndIsr(1, 0, (1, 2), bench.term.ctx.epoch))
        zk = bench.term.zk
        current = await zk.read_partition_state(T0)
        assert current is not None
        written = await zk.write_partition_state(T0, current.with_(leader=2, leader_epoch=1))
        assert written.zk_version == current.zk_version + 1
        assert await bench.state(T0) == written
        with pytest.raises(BadVersionError):  # the version read is stale now
            await zk.write_partition_state(T0, current.with_(leader=1, leader_epoch=2))
        await bench.close()

    run(scenario)


def test_a_state_of_a_newer_controller_means_this_one_moved() -> None:
    async def scenario() -> None:
        bench = await term_bench([1], {"t": {0: [1]}})
        newer = bench.term.ctx.epoch + 1
        await bench.write_state(T0, LeaderAndIsr(1, 0, (1,), newer))
        with pytest.raises(ControllerMovedError, match=f"epoch {newer}"):
            await bench.term.zk.read_partition_state(T0)
        assert await bench.term.zk.read_partition_state(TopicPartition("t", 9)) is None
        await bench.close()

    run(scenario)


@pytest.mark.parametrize(
    ("config", "default", "expected"),
    [
        (None, False, False),
        (None, True, True),
        ({"unclean.leader.election.enable": "true"}, False, True),
        ({"unclean.leader.election.enable": "FALSE"}, True, False),
        ({"unclean.leader.election.enable": "maybe"}, True, True),
    ],
)
def test_unclean_allowed_reads_the_topic_override(
    config: dict[str, str] | None, default: bool, expected: bool
) -> None:
    async def scenario() -> bool:
        bench = await term_bench([1])
        if config is not None:
            await bench.zk.create(
                zk_data.topic_config_path("t"), zk_data.encode_topic_config(config)
            )
        allowed = await bench.term.zk.unclean_allowed("t", default)
        await bench.close()
        return allowed

    assert run(scenario) is expected
