"""Broker ids as Kafka's ZooKeeper-era brokers pick them: the one stored in meta.properties,
else the configured one, else (broker.id=-1) a new one from /brokers/seqid above
reserved.broker.max.id; bad combinations are clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkasim.common.clock import ManualClock
from kafkasim.common.errors import InconsistentBrokerMetadataError, InvalidConfigError
from kafkasim.node.broker_id import generate_broker_id, resolve_broker_id
from kafkasim.node.config import BrokerConfig
from kafkasim.sim.loop import run_simulation
from kafkasim.sim.zookeeper import SimZooKeeperClient, SimZooKeeperServer
from kafkasim.storage.checkpoints import write_meta_properties
from kafkasim.storage.log_manager import LogManager


def config(tmp_path: Path, **props: object) -> BrokerConfig:
    base: dict[str, object] = {
        "zookeeper.connect": "zk:2181",
        "listeners": "PLAINTEXT://127.0.0.1:9092",
        "log.dirs": str(tmp_path / "logs"),
    }
    base.update({k.replace("_", "."): v for k, v in props.items()})
    return BrokerConfig.from_props(base)


def test_generated_ids_count_up_above_the_reserved_ones_and_stored_ids_are_kept(
    tmp_path: Path,
) -> None:
    async def main() -> list[int]:
        server = SimZooKeeperServer()

        def session() -> SimZooKeeperClient:
            return SimZooKeeperClient(server, 6000, "b")

        first = await resolve_broker_id(config(tmp_path / "a", broker_id=-1), session)
        second = await resolve_broker_id(config(tmp_path / "b", broker_id=-1), session)
        # A broker that ran before (its id in meta.properties) keeps its id.
        (tmp_path / "c" / "logs").mkdir(parents=True)
        write_meta_properties(tmp_path / "c" / "logs", 1001, None)
        again = await resolve_broker_id(config(tmp_path / "c", broker_id=-1), session)
        configured = await resolve_broker_id(config(tmp_path / "d", broker_id=7), session)
        zk = session()
        await zk.start()
        try:
            small = await generate_broker_id(zk, 10)
        finally:
            await zk.close()
        return [first.broker_id, second.broker_id, again.broker_id, configured.broker_id, small]

    assert run_simulation(main(), time_limit_s=60) == [1001, 1002, 1001, 7, 13]


def test_a_configured_id_that_differs_from_the_stored_one_is_refused(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    write_meta_properties(tmp_path / "logs", 3, None)

    async def main() -> None:
        # The configured id is kept; the log manager's start-up checks it against the dirs.
        resolved = await resolve_broker_id(
            config(tmp_path, broker_id=4),
            lambda: SimZooKeeperClient(SimZooKeeperServer(), 6000),
        )
        manager = LogManager(
            resolved.log_dirs,
            resolved.log_config(),
            ManualClock(0),
            broker_id=resolved.broker_id,
        )
        manager.startup()

    with pytest.raises(
        InconsistentBrokerMetadataError, match=r"Configured broker\.id 4 doesn't match stored"
    ):
        run_simulation(main(), time_limit_s=60)


def test_configured_ids_stay_at_or_below_reserved_broker_max_id(tmp_path: Path) -> None:
    with pytest.raises(
        InvalidConfigError, match=r"not greater than reserved.broker.max.id \(1000\)"
    ):
        config(tmp_path, broker_id=1001)
    assert config(tmp_path, broker_id=1001, broker_id_generation_enable=False).broker_id == 1001
    with pytest.raises(InvalidConfigError, match=r"broker\.id must be set"):
        config(tmp_path, broker_id=-1, broker_id_generation_enable=False)
