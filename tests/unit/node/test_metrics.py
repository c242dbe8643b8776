"""A broker's Prometheus metrics (node/metrics.py), read from the in-process simulated cluster.

The series carry the names Kafka's JMX exporter gives Kafka's MBeans, so each test reads a
broker's text exposition exactly as a scrape would and checks one behaviour a Kafka operator
alerts on: request rates and bytes, ISR shrink/expand, the single active controller, offline
partitions. One test scrapes a real HTTP endpoint on loopback.
"""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kafkasim import proto
from kafkasim.common.types import TopicPartition
from kafkasim.node.broker import Broker
from kafkasim.node.metrics import LATENCY_BUCKETS_MS, RequestStats, request_name
from kafkasim.sim.cluster import SimCluster
from tests.sim.helpers import create, leader_of, partition_on, produce_all, simulate

TP = TopicPartition("events", 0)

ACTIVE_CONTROLLER = "kafka_controller_kafkacontroller_activecontrollercount"
OFFLINE_PARTITIONS = "kafka_controller_kafkacontroller_offlinepartitionscount"
UNDER_REPLICATED = "kafka_server_replicamanager_underreplicatedpartitions"
ISR_SHRINKS = "kafka_server_replicamanager_isrshrinks_total"
ISR_EXPANDS = "kafka_server_replicamanager_isrexpands_total"
REQUESTS = "kafka_network_requestmetrics_requests_total"
TOTAL_TIME_MS = "kafka_network_requestmetrics_totaltimems"
BYTES_IN = "kafka_server_brokertopicmetrics_bytesin_total"
BYTES_OUT = "kafka_server_brokertopicmetrics_bytesout_total"
LOG_SIZE = "kafka_log_log_size"

# A bound on the real-time test (it normally takes well under a second).
HTTP_TEST_TIMEOUT_S = 30.0


def samples(text: bytes | str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition, keyed by name and label set."""
    if isinstance(text, bytes):
        text = text.decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(broker: Broker, name: str, **labels: str) -> float:
    """One sample of a broker's scrape; 0 for a labelled series not yet created (as Prometheus
    reads an absent counter)."""
    found = samples(broker.metrics.render()).get((name, frozenset(labels.items())))
    if found is None and not labels:
        raise KeyError(f"{name} is not exposed")
    return 0.0 if found is None else found


@pytest.mark.parametrize(
    ("method", "name"),
    [
        (proto.METHOD_PRODUCE, "Produce"),
        (proto.METHOD_PRODUCE_STREAM, "Produce"),  # a pipelined connection carries Produce
        (proto.METHOD_FETCH, "Fetch"),
        (proto.METHOD_REPLICA_FETCH, "ReplicaFetch"),
        (proto.METHOD_LEADER_AND_ISR, "LeaderAndIsr"),
    ],
)
def test_requests_are_counted_under_their_kafka_request_name(method: str, name: str) -> None:
    assert request_name(method) == name


@pytest.mark.parametrize(
    ("elapsed_ms", "smallest_le"),
    [
        (0, "1.0"),  # under the clock's resolution
        (1, "1.0"),  # a bound is inclusive (le)
        (2, "2.0"),
        (3, "5.0"),
        (30_000, "30000.0"),
        (30_001, "+Inf"),
    ],
)
def test_a_latency_falls_in_every_bucket_from_the_first_bound_at_or_above_it(
    elapsed_ms: int, smallest_le: str
) -> None:
    stats = RequestStats()
    stats.record(elapsed_ms)
    buckets = stats.cumulative_buckets()
    assert len(buckets) == len(LATENCY_BUCKETS_MS) + 1
    first = next(le for le, count in buckets if count == 1)
    assert first == smallest_le
    assert buckets[-1] == ("+Inf", 1)
    assert (stats.count, stats.sum_ms) == (1, elapsed_ms)


def test_produce_and_fetch_are_counted_with_latency_and_bytes_on_the_leader(
    tmp_path: Path,
) -> None:
    """What was appended (bytes in) is what the log holds, what each follower copied and what
    a consumer read back (bytes out, labelled by fetcher)."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "events")
        acked = await produce_all(client, TP, [b"record-%d" % i for i in range(5)])
        assert len(acked) == 5
        leader_id = leader_of(cluster, TP)
        leader = cluster.brokers[leader_id]
        followers = [b for b in cluster.brokers if b != leader_id]
        await cluster.wait_for(
            lambda: all(partition_on(cluster, f, TP).high_watermark == 5 for f in followers),
            what="the followers to learn the HW",
        )
        await client.read_all(TP)
        produce = {"request": "Produce"}
        assert value(leader, REQUESTS, **produce) == 5
        assert value(leader, TOTAL_TIME_MS + "_count", **produce) == 5
        # acks=all waits for the followers: simulated network time, in whole virtual ms.
        assert value(leader, TOTAL_TIME_MS + "_sum", **produce) > 0
        assert value(leader, REQUESTS, request="ReplicaFetch") > 0
        log_size = value(leader, LOG_SIZE, topic="events", partition="0")
        assert log_size > 0
        assert value(leader, BYTES_IN, topic="events") == log_size
        assert value(leader, BYTES_OUT, topic="events", fetcher="follower") == 2 * log_size
        assert value(leader, BYTES_OUT, topic="events", fetcher="consumer") == log_size
        for follower_id in followers:
            follower = cluster.brokers[follower_id]
            assert value(follower, REQUESTS, **produce) == 0
            assert value(follower, BYTES_IN, topic="events") == 0
            assert value(follower, LOG_SIZE, topic="events", partition="0") == log_size
        for broker_id, broker in cluster.brokers.items():
            assert value(broker, "kafka_server_replicamanager_partitioncount") == 1
            leads = 1 if broker_id == leader_id else 0
            assert value(broker, "kafka_server_replicamanager_leadercount") == leads

    simulate(tmp_path, scenario)


def test_a_stalled_follower_moves_isr_shrinks_and_under_replicated_then_isr_expands(
    tmp_path: Path,
) -> None:
    """Kafka's first alert: UnderReplicatedPartitions > 0 after replica.lag.time.max.ms."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "events")
        await produce_all(client, TP, [b"a", b"b"])
        leader_id = leader_of(cluster, TP)
        leader = cluster.brokers[leader_id]
        stalled = next(b for b in cluster.brokers if b != leader_id)
        assert (value(leader, UNDER_REPLICATED), value(leader, ISR_SHRINKS)) == (0, 0)
        cluster.network.isolate(f"broker-{stalled}")  # its ZooKeeper session stays alive
        await produce_all(client, TP, [b"c"], acks=1)
        await cluster.wait_for(
            lambda: stalled not in partition_on(cluster, leader_id, TP).isr,
            what="the ISR to shrink",
        )
        assert (value(leader, UNDER_REPLICATED), value(leader, ISR_SHRINKS)) == (1, 1)
        assert value(leader, ISR_EXPANDS) == 0
        cluster.network.heal(f"broker-{stalled}")
        await cluster.wait_for(
            lambda: stalled in partition_on(cluster, leader_id, TP).isr, what="the ISR to expand"
        )
        assert (value(leader, UNDER_REPLICATED), value(leader, ISR_EXPANDS)) == (0, 1)
        # Only a leader reports under-replication.
        for broker_id, broker in cluster.brokers.items():
            if broker_id != leader_id:
                assert value(broker, UNDER_REPLICATED) == 0

    simulate(tmp_path, scenario)


def test_exactly_one_broker_reports_the_active_controller_also_after_failover(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        def active() -> list[int]:
            return [b for b, broker in cluster.brokers.items() if value(broker, ACTIVE_CONTROLLER)]

        assert active() == [cluster.controller_id()]
        old = cluster.controller_id()
        await cluster.crash(old)
        await cluster.wait_for(
            lambda: cluster.controller_id() not in (-1, old), what="a new controller"
        )
        assert active() == [cluster.controller_id()]

    simulate(tmp_path, scenario)


def test_the_active_controller_counts_a_partition_offline_once_all_its_replicas_die(
    tmp_path: Path,
) -> None:
    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, "events", rf=2)
        replicas = partition_on(cluster, leader_of(cluster, TP), TP).assigned_replicas
        controller = cluster.brokers[cluster.controller_id()]
        assert value(controller, OFFLINE_PARTITIONS) == 0
        for broker_id in replicas:
            await cluster.crash(broker_id)
        (survivor,) = cluster.brokers.values()

        def offline() -> float:
            return value(survivor, OFFLINE_PARTITIONS)

        await cluster.wait_for(lambda: offline() == 1, what="the partition to go offline")
        assert value(survivor, ACTIVE_CONTROLLER) == 1

    simulate(tmp_path, scenario)


def test_every_series_names_the_kafka_mbean_it_stands_for(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> str:
        await create(cluster, "events")
        return cluster.brokers[leader_of(cluster, TP)].metrics.render().decode()

    text = simulate(tmp_path, scenario)
    families = list(text_string_to_metric_families(text))
    assert len(families) >= 12
    for family in families:
        assert family.name.startswith("kafka_"), family.name
        assert "(kafka." in family.documentation and ",name=" in family.documentation, family.name


def test_metrics_are_scraped_over_http_on_loopback_and_the_endpoint_stops_with_the_broker(
    tmp_path: Path,
) -> None:
    """A real scrape: the broker serves on a free port (metrics.port=0) of its listener host,
    the scrape reads the broker's state on its event loop, and stopping the broker closes the
    endpoint. The simulated parts run on a real event loop here: the HTTP server is a thread."""

    def get(url: str) -> str:
        with urllib.request.urlopen(url, timeout=HTTP_TEST_TIMEOUT_S) as response:
            body: bytes = response.read()
            return body.decode()

    async def main() -> tuple[str, str, str]:
        cluster = SimCluster(
            tmp_path,
            brokers=1,
            broker_props={"listeners": "PLAINTEXT://127.0.0.1:0", "metrics.port": 0},
        )
        await cluster.start()
        try:
            await cluster.wait_for(lambda: cluster.controller_id() == 1, what="a controller")
            address = cluster.brokers[1].metrics_address
            assert address is not None and address.startswith("127.0.0.1:")
            assert not address.endswith(":0")
            body = await asyncio.to_thread(get, f"http://{address}/metrics")
            only = await asyncio.to_thread(
                get, f"http://{address}/metrics?name[]={ACTIVE_CONTROLLER}"
            )
            # A clean stop: a crash on a real loop waits out ZooKeeper retries in real time.
            await cluster.stop_broker(1)
        finally:
            await cluster.stop()
        return address, body, only

    address, body, only = asyncio.run(asyncio.wait_for(main(), HTTP_TEST_TIMEOUT_S))
    assert samples(body)[ACTIVE_CONTROLLER, frozenset()] == 1
    assert f"# HELP {UNDER_REPLICATED} " in body
    assert set(samples(only)) == {(ACTIVE_CONTROLLER, frozenset())}
    with pytest.raises(OSError):
        get(f"http://{address}/metrics")
