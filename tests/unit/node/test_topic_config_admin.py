"""Topic config changes written by the broker that serves them (``node.topic_config_admin``),
on SimZooKeeper (virtual time), with no controller anywhere: what is written and how (as
Kafka's ``AdminZkClient.changeTopicConfig``), what is refused without writing anything, and
why two brokers changing one topic at once cannot lose a change (version-checked writes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from kafkasim.common.coordination import Stat, Watcher
from kafkasim.common.errors import error_for_name
from kafkasim.controller import zk_data
from kafkasim.controller.api import TopicConfigAlteration
from kafkasim.controller.topic_configs import AlterConfigOp, OpType
from kafkasim.node import topic_config_admin
from kafkasim.node.topic_config_admin import alter_topic_configs
from kafkasim.sim.loop import run_simulation
from kafkasim.sim.zookeeper import SimZooKeeperClient, SimZooKeeperServer

SESSION_MS = 6_000
INVALID_CONFIG = error_for_name("INVALID_CONFIG").code
INVALID_REQUEST = error_for_name("INVALID_REQUEST").code
UNKNOWN_TOPIC_OR_PARTITION = error_for_name("UNKNOWN_TOPIC_OR_PARTITION").code
UNKNOWN_SERVER_ERROR = error_for_name("UNKNOWN_SERVER_ERROR").code
OVERRIDES = {"min.insync.replicas": "2"}


def alteration(topic: str, *ops: tuple[str, int, str]) -> TopicConfigAlteration:
    return TopicConfigAlteration(topic, [AlterConfigOp(*op) for op in ops])


class PausingAfterRead(SimZooKeeperClient):
    """A broker's session that, once it has read a topic's overrides, waits for ``release``
    before going on: another broker's change goes between its read and its write."""

    def __init__(self, server: SimZooKeeperServer, name: str) -> None:
        super().__init__(server, SESSION_MS, name)
        self.read = asyncio.Event()
        self.release = asyncio.Event()

    async def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, Stat]:
        try:
            return await super().get(path, watch)
        finally:
            if path.startswith(zk_data.CONFIG_TOPICS + "/") and not self.read.is_set():
                self.read.set()
                await self.release.wait()


class Bench:
    """ZooKeeper with topic ``t`` (its overrides znode holding ``overrides``, or none when
    None) and two broker sessions."""

    def __init__(self) -> None:
        self.server = SimZooKeeperServer()
        self.zk = SimZooKeeperClient(self.server, SESSION_MS, "broker-2")
        self.slow = PausingAfterRead(self.server, "broker-3")

    async def start(self, overrides: dict[str, str] | None) -> None:
        await self.zk.start()
        await self.slow.start()
        for path in (zk_data.CONFIG_CHANGES, zk_data.CONFIG_TOPICS):
            await self.zk.create(path, makepath=True)
        await self.zk.create(
            zk_data.topic_path("t"), zk_data.encode_topic_assignment({0: [1]}), makepath=True
        )
        if overrides is not None:
            await self.zk.create(
                zk_data.topic_config_path("t"), zk_data.encode_topic_config(overrides)
            )

    async def overrides(self, topic: str = "t") -> dict[str, str]:
        data, _ = await self.zk.get(zk_data.topic_config_path(topic))
        return zk_data.decode_topic_config(data)

    async def notifications(self) -> list[bytes]:
        children = sorted(await self.zk.get_children(zk_data.CONFIG_CHANGES))
        return [(await self.zk.get(f"{zk_data.CONFIG_CHANGES}/{c}"))[0] for c in children]


def run(
    scenario: Callable[[Bench], Awaitable[None]],
    overrides: dict[str, str] | None = OVERRIDES,
) -> None:
    async def main() -> None:
        bench = Bench()
        await bench.start(overrides)
        try:
            await scenario(bench)
        finally:
            await bench.slow.close()
            await bench.zk.close()

    run_simulation(main(), time_limit_s=600)


def test_a_change_is_written_with_a_notification_as_kafka_writes_it() -> None:
    """The overrides and a sequential /config/changes/config_change_ with Kafka's
    {"version":2,"entity_path":"topics/<t>"}; validate_only checks and writes nothing."""

    async def scenario(bench: Bench) -> None:
        results = await alter_topic_configs(
            bench.zk,
            [alteration("t", ("retention.ms", OpType.SET, "1000"), ("min.insync.replicas", 1, ""))],
            validate_only=False,
        )
        assert [(r.name, r.error_code) for r in results] == [("t", 0)]
        assert await bench.overrides() == {"retention.ms": "1000"}
        children = await bench.zk.get_children(zk_data.CONFIG_CHANGES)
        assert children == ["config_change_0000000000"]
        assert await bench.notifications() == [b'{"version":2,"entity_path":"topics/t"}']

        validated = await alter_topic_configs(
            bench.zk, [alteration("t", ("retention.ms", 0, "7"))], validate_only=True
        )
        assert [r.error_code for r in validated] == [0]
        assert await bench.overrides() == {"retention.ms": "1000"}
        assert len(await bench.notifications()) == 1

    run(scenario)


@pytest.mark.parametrize(
    ("ops", "code", "named"),
    [
        ((("retention.ms", 0, "-5"),), INVALID_CONFIG, "retention.ms"),
        ((("retention.ms", 0, "soon"),), INVALID_CONFIG, "'soon' for configuration retention.ms"),
        ((("no.such.key", 0, "1"),), INVALID_CONFIG, "no.such.key"),
        ((("cleanup.policy", 0, "shred"),), INVALID_CONFIG, "cleanup.policy"),
        ((("retention.ms", 2, "1"),), INVALID_REQUEST, "retention.ms"),  # APPEND, not a list
        ((("retention.ms", 0, "1"), ("retention.ms", 1, "")), INVALID_REQUEST, "duplicate"),
    ],
)
def test_bad_values_are_refused_naming_the_key_and_nothing_is_written(
    ops: tuple[tuple[str, int, str], ...], code: int, named: str
) -> None:
    async def scenario(bench: Bench) -> None:
        for validate_only in (False, True):
            (result,) = await alter_topic_configs(
                bench.zk, [alteration("t", *ops)], validate_only=validate_only
            )
            assert result.error_code == code, result
            assert named in result.error_message
        assert await bench.overrides() == OVERRIDES
        assert await bench.notifications() == []

    run(scenario)


def test_each_topic_is_answered_on_its_own_and_an_unknown_topic_gets_no_config() -> None:
    async def scenario(bench: Bench) -> None:
        results = await alter_topic_configs(
            bench.zk,
            [
                alteration("nowhere", ("retention.ms", 0, "1")),
                alteration("t", ("retention.ms", 0, "-5")),
                alteration("t", ("segment.ms", 0, "60000")),
            ],
            validate_only=False,
        )
        assert [(r.name, r.error_code) for r in results] == [
            ("nowhere", UNKNOWN_TOPIC_OR_PARTITION),
            ("t", INVALID_CONFIG),
            ("t", 0),
        ]
        assert results[0].error_message == "Topic 'nowhere' does not exist."
        assert await bench.zk.exists(zk_data.topic_config_path("nowhere")) is None
        assert await bench.overrides() == {"min.insync.replicas": "2", "segment.ms": "60000"}
        assert len(await bench.notifications()) == 1

    run(scenario)


@pytest.mark.parametrize("overrides", [{}, None], ids=["overrides-znode", "no-overrides-znode"])
def test_concurrent_changes_from_two_brokers_both_land(overrides: dict[str, str] | None) -> None:
    """Broker 3 reads the overrides, broker 2 writes its change, then broker 3 writes: its
    write is conditional on the version it read (or on the znode being absent), fails, and it
    applies its operations again to what broker 2 wrote. An unconditional write would drop
    broker 2's retention.ms."""

    async def scenario(bench: Bench) -> None:
        slow = asyncio.create_task(
            alter_topic_configs(
                bench.slow, [alteration("t", ("segment.ms", 0, "60000"))], validate_only=False
            )
        )
        await bench.slow.read.wait()
        fast = await alter_topic_configs(
            bench.zk, [alteration("t", ("retention.ms", 0, "1000"))], validate_only=False
        )
        assert await bench.overrides() == {"retention.ms": "1000"}
        bench.slow.release.set()
        assert [r.error_code for r in [*fast, *await slow]] == [0, 0]
        assert await bench.overrides() == {"retention.ms": "1000", "segment.ms": "60000"}
        assert len(await bench.notifications()) == 2

    run(scenario, overrides)


def test_the_oldest_notifications_are_purged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topic_config_admin, "CONFIG_CHANGES_RETAINED", 2)

    async def scenario(bench: Bench) -> None:
        for ms in ("1000", "2000", "3000", "4000"):
            await alter_topic_configs(
                bench.zk, [alteration("t", ("retention.ms", 0, ms))], validate_only=False
            )
        children = sorted(await bench.zk.get_children(zk_data.CONFIG_CHANGES))
        assert children == ["config_change_0000000002", "config_change_0000000003"]

    run(scenario)


def test_zookeeper_out_of_reach_is_unknown_server_error_naming_it() -> None:
    """Connection loss is retried (bounded); then the topic's answer says ZooKeeper, and
    nothing was written."""

    async def scenario(bench: Bench) -> None:
        bench.slow.release.set()
        bench.slow.disconnect()
        (result,) = await alter_topic_configs(
            bench.slow, [alteration("t", ("retention.ms", 0, "1"))], validate_only=False
        )
        assert result.error_code == UNKNOWN_SERVER_ERROR
        assert "ZooKeeper" in result.error_message
        assert await bench.overrides() == OVERRIDES
        assert await bench.notifications() == []

    run(scenario)
