"""A broker's topic config change listener on SimZooKeeper (virtual time): which
notifications it applies, to what (the cached config and every live log of the topic), and
what it skips or survives.

Why: brokers must apply a changed topic config without a restart, exactly once per change
they have not seen, and a bad notification or bad data must not stop the ones after it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from kafkasim.common.clock import ManualClock
from kafkasim.common.scram import (
    MECHANISMS,
    credential_from_password,
    encode_credential,
    password_matches,
)
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.node.config import BrokerConfig
from kafkasim.node.config_changes import TopicConfigChangeListener
from kafkasim.node.scram_cache import ScramCredentialCache, decode_user_credentials
from kafkasim.node.topic_config_admin import write_entity_config
from kafkasim.sim.loop import run_simulation
from kafkasim.sim.zookeeper import SimZooKeeperClient, SimZooKeeperServer
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log_manager import LogManager

TP = TopicPartition("t", 0)


class Bench:
    def __init__(self, tmp_path: Path) -> None:
        self.server = SimZooKeeperServer()
        self.admin = SimZooKeeperClient(self.server, 6_000, "admin")
        self.zk = SimZooKeeperClient(self.server, 6_000, "broker")
        self.config = BrokerConfig.from_props(
            {"broker.id": 1, "log.dirs": str(tmp_path), "zookeeper.connect": "sim"}
        )
        self.cache: dict[str, LogConfig] = {}
        self.logs = LogManager([tmp_path], self.config.log_config(), ManualClock())
        self.logs.startup()
        self.log = self.logs.get_or_create_log(TP)
        self.listener = TopicConfigChangeListener(1, self.zk, self.config, self.cache, self.logs)

    async def start(self) -> None:
        await self.admin.start()
        await self.zk.start()
        for path in (zk_data.CONFIG_CHANGES, zk_data.CONFIG_TOPICS):
            await self.admin.create(path, makepath=True)

    async def change(self, topic: str, config: dict[str, str], *, entity: str = "") -> None:
        """What the controller writes: the overrides, then the notification."""
        path = zk_data.topic_config_path(topic)
        data = zk_data.encode_topic_config(config)
        if await self.admin.exists(path) is None:
            await self.admin.create(path, data)
        else:
            await self.admin.set(path, data)
        await self.notify(zk_data.encode_config_change(entity or zk_data.topic_entity_path(topic)))

    async def notify(self, data: bytes) -> None:
        await self.admin.create(
            f"{zk_data.CONFIG_CHANGES}/{zk_data.CONFIG_CHANGE_PREFIX}", data, sequence=True
        )

    async def settle(self) -> None:
        for _ in range(5):
            await self.listener.wait_idle()
            await self.zk.get_children("/")  # a round trip: pending watch events arrive


def run(tmp_path: Path, scenario: Callable[[Bench], Awaitable[None]]) -> None:
    async def main() -> None:
        bench = Bench(tmp_path)
        await bench.start()
        try:
            await scenario(bench)
        finally:
            await bench.listener.stop()
            bench.logs.shutdown()
            await bench.zk.close()
            await bench.admin.close()

    run_simulation(main(), time_limit_s=600)


def test_a_change_reaches_the_cache_and_every_live_log_of_the_topic(tmp_path: Path) -> None:
    async def scenario(bench: Bench) -> None:
        await bench.listener.start()
        await bench.change("t", {"retention.ms": "1234", "min.insync.replicas": "2"})
        await bench.settle()
        assert bench.log.config.retention_ms == 1234
        assert bench.log.config.min_insync_replicas == 2
        assert bench.cache["t"] == bench.log.config
        await bench.change("t", {})  # every override deleted: the broker defaults again
        await bench.settle()
        assert bench.log.config == bench.config.log_config()
        assert bench.listener.changes_applied == 2

    run(tmp_path, scenario)


def test_notifications_before_start_are_skipped(tmp_path: Path) -> None:
    """A starting broker has no cached config; it reads overrides when it hosts a topic."""

    async def scenario(bench: Bench) -> None:
        await bench.change("t", {"retention.ms": "1"})
        await bench.change("t", {"retention.ms": "2"})
        await bench.listener.start()
        await bench.settle()
        assert bench.listener.last_executed == 1
        assert bench.listener.changes_applied == 0
        assert bench.log.config.retention_ms != 2

    run(tmp_path, scenario)


def test_bad_notifications_and_bad_data_are_skipped_not_fatal(tmp_path: Path) -> None:
    async def scenario(bench: Bench) -> None:
        await bench.listener.start()
        await bench.notify(b"not json")
        await bench.notify(b'{"version":1,"entity_path":"topics/t"}')  # an unknown version
        await bench.change("u", {"retention.ms": "5"}, entity="brokers/1")  # another entity
        await bench.admin.create(
            zk_data.topic_config_path("t"), b'{"version":1,"config":{"retention.ms":"soon"}}'
        )
        await bench.notify(zk_data.encode_config_change("topics/t"))  # does not parse
        await bench.change("t", {"retention.ms": "77"})
        await bench.settle()
        assert bench.log.config.retention_ms == 77
        assert bench.listener.last_executed == 4
        assert "u" not in bench.cache

    run(tmp_path, scenario)


def test_a_deleted_topic_leaves_the_cache(tmp_path: Path) -> None:
    async def scenario(bench: Bench) -> None:
        await bench.listener.start()
        await bench.change("gone", {"retention.ms": "5"})
        await bench.settle()
        assert "gone" in bench.cache
        await bench.admin.delete(zk_data.topic_config_path("gone"))
        await bench.notify(zk_data.encode_config_change("topics/gone"))
        await bench.settle()
        assert "gone" not in bench.cache

    run(tmp_path, scenario)


def test_users_notifications_update_the_scram_credential_cache(tmp_path: Path) -> None:
    """``kafkasim configs --entity-type users`` writes /config/users/<user> and a users/<user>
    notification (write_entity_config, as here): the broker's credential cache follows, for a
    user name that needs sanitizing too, and a deleted mechanism or user is gone."""
    sha256 = MECHANISMS["SCRAM-SHA-256"]

    async def scenario(bench: Bench) -> None:
        cache = ScramCredentialCache()
        bench.listener = TopicConfigChangeListener(
            1, bench.zk, bench.config, bench.cache, bench.logs, scram_credentials=cache
        )
        await bench.admin.create(zk_data.CONFIG_USERS, makepath=True)
        await bench.listener.start()
        await cache.load_all(bench.zk)
        stored = {
            m: encode_credential(credential_from_password(MECHANISMS[m], "pw", 4096))
            for m in MECHANISMS
        }
        for user in ("alice", "bob@ex ample*"):
            await write_entity_config(
                bench.admin,
                zk_data.user_config_path(user),
                zk_data.user_entity_path(user),
                lambda current: {**current, **stored},
                validate_only=False,
            )
        await bench.settle()
        assert set(cache.users()) == {"alice", "bob@ex ample*"}
        assert await bench.admin.exists("/config/users/bob%40ex%20ample%2A") is not None
        assert password_matches(sha256, cache.get("alice", "SCRAM-SHA-256"), "pw")  # type: ignore[arg-type]
        await write_entity_config(
            bench.admin,
            zk_data.user_config_path("alice"),
            zk_data.user_entity_path("alice"),
            lambda current: {k: v for k, v in current.items() if k != "SCRAM-SHA-256"},
            validate_only=False,
        )
        await bench.admin.delete(zk_data.user_config_path("bob@ex ample*"))
        await bench.notify(zk_data.encode_config_change(zk_data.user_entity_path("bob@ex ample*")))
        await bench.settle()
        assert cache.get("alice", "SCRAM-SHA-256") is None
        assert cache.get("alice", "SCRAM-SHA-512") is not None
        assert set(cache.users()) == {"alice"}

    run(tmp_path, scenario)


def test_the_zookeeper_format_of_user_credentials_is_kafkas() -> None:
    """What Kafka's ConfigCommand writes under /config/users/<user> reads back; other keys
    (client quotas) and a credential that does not decode are left out."""
    credential = credential_from_password(MECHANISMS["SCRAM-SHA-512"], "pw", 8192)
    data = zk_data.encode_topic_config(
        {
            "SCRAM-SHA-512": encode_credential(credential),
            "SCRAM-SHA-256": "salt=bad",
            "producer_byte_rate": "1024",
        }
    )
    assert data.startswith(b'{"version":1,"config":{"SCRAM-SHA-256":"salt=bad",')
    assert decode_user_credentials(data, "alice") == {"SCRAM-SHA-512": credential}
