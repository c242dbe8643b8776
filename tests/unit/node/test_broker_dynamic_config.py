"""Dynamic broker configs (``node.broker_config_admin``) on SimZooKeeper: what a change is
allowed to write, and a broker applying ``/config/brokers/<default>`` and
``/config/brokers/<id>`` to its live logs through its config change listener.

Why: ``kafka-configs --entity-type brokers`` must change the topic defaults of running
brokers without a restart, with Kafka's precedence (topic override, then the broker's own
dynamic value, then the cluster default, then server.properties), and a refused change must
write nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkasim.common.errors import KafkaError
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.topic_configs import AlterConfigOp, OpType
from kafkasim.node.broker_config_admin import alter_broker_config, load_dynamic_config
from tests.unit.node.test_config_changes import Bench, run

SET, DELETE, APPEND = OpType.SET, OpType.DELETE, OpType.APPEND


async def alter(bench: Bench, name: str, *ops: AlterConfigOp) -> KafkaError | None:
    return await alter_broker_config(bench.admin, bench.config, name, ops, validate_only=False)


def test_the_cluster_default_and_the_broker_own_value_reach_live_logs(tmp_path: Path) -> None:
    async def scenario(bench: Bench) -> None:
        other = bench.logs.get_or_create_log(TopicPartition("u", 0))
        await bench.admin.create(zk_data.CONFIG_BROKERS, makepath=True)
        await bench.change("t", {"retention.ms": "1234"})
        await bench.change("u", {})
        bench.cache["t"] = bench.config.log_config({"retention.ms": "1234"})
        bench.cache["u"] = bench.config.log_config()
        await bench.listener.start()
        assert await alter(bench, "", AlterConfigOp("log.retention.ms", SET, "5000")) is None
        assert await alter(bench, "", AlterConfigOp("log.segment.bytes", SET, "65536")) is None
        await bench.settle()
        assert (other.config.retention_ms, other.config.segment_bytes) == (5000, 65536)
        assert (bench.log.config.retention_ms, bench.log.config.segment_bytes) == (1234, 65536)
        # Another broker's own value is not this broker's.
        assert await alter(bench, "2", AlterConfigOp("log.retention.ms", SET, "9")) is None
        await bench.settle()
        assert other.config.retention_ms == 5000
        # This broker's own value wins over the cluster default; deleting it restores it.
        assert await alter(bench, "1", AlterConfigOp("log.retention.ms", SET, "7000")) is None
        await bench.settle()
        assert other.config.retention_ms == 7000
        assert bench.config.dynamic.own == {"log.retention.ms": "7000"}
        assert await alter(bench, "1", AlterConfigOp("log.retention.ms", DELETE)) is None
        await bench.settle()
        assert other.config.retention_ms == 5000
        data, _ = await bench.admin.get(zk_data.broker_config_path("<default>"))
        assert zk_data.decode_topic_config(data) == {
            "log.retention.ms": "5000",
            "log.segment.bytes": "65536",
        }

    run(tmp_path, scenario)


@pytest.mark.parametrize(
    ("name", "op", "error", "message"),
    [
        ("1", AlterConfigOp("log.dirs", SET, "/x"), "INVALID_REQUEST", "dynamically: log.dirs"),
        ("1", AlterConfigOp("num.io.threads", SET, "4"), "INVALID_REQUEST", "num.io.threads"),
        ("1", AlterConfigOp("log.retention.ms", SET, "soon"), "INVALID_CONFIG", "retention"),
        ("1", AlterConfigOp("log.cleanup.policy", APPEND, "compact"), "INVALID_REQUEST", "SET"),
        ("b1", AlterConfigOp("log.retention.ms", SET, "1"), "INVALID_REQUEST", "integer"),
    ],
)
def test_a_refused_change_names_what_is_wrong_and_writes_nothing(
    tmp_path: Path, name: str, op: AlterConfigOp, error: str, message: str
) -> None:
    async def scenario(bench: Bench) -> None:
        await bench.admin.create(zk_data.CONFIG_BROKERS, makepath=True)
        refused = await alter(bench, name, op)
        assert refused is not None
        assert refused.error_name == error and message in refused.message, refused
        assert await bench.admin.get_children(zk_data.CONFIG_BROKERS) == []
        assert await bench.admin.get_children(zk_data.CONFIG_CHANGES) == []

    run(tmp_path, scenario)


def test_a_starting_broker_loads_the_dynamic_configs_and_skips_unknown_keys(
    tmp_path: Path,
) -> None:
    """Written by another tool (say, Kafka's): a key kafkasim cannot change is not loaded."""

    async def scenario(bench: Bench) -> None:
        config = {"log.retention.ms": "42", "num.io.threads": "16"}
        await bench.admin.create(
            zk_data.broker_config_path("1"), zk_data.encode_topic_config(config), makepath=True
        )
        assert await load_dynamic_config(bench.zk, bench.config)
        assert bench.config.dynamic.own == {"log.retention.ms": "42"}
        assert bench.config.log_config().retention_ms == 42
        assert not await load_dynamic_config(bench.zk, bench.config)  # unchanged

    run(tmp_path, scenario)
