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
from types import SimpleNamespace
from typing import Any, cast

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kafkasim import proto
from kafkasim.common.clock import ManualClock
from kafkasim.common.errors import (
    CorruptRecordError,
    InvalidRecordError,
    KafkaError,
    NotLeaderOrFollowerError,
)
from kafkasim.common.types import TopicPartition
from kafkasim.node.apis_replica import produce_params, produce_response
from kafkasim.node.broker import Broker
from kafkasim.node.metrics import LATENCY_BUCKETS_MS, BrokerMetrics, RequestStats, request_name
from kafkasim.node.replica_types import ProducePartitionResult
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.sim.cluster import SimCluster, broker_address
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
MESSAGES_IN = "kafka_server_brokertopicmetrics_messagesin_total"
FAILED_PRODUCE = "kafka_server_brokertopicmetrics_failedproducerequests_total"
FAILED_FETCH = "kafka_server_brokertopicmetrics_failedfetchrequests_total"
UNDER_MIN_ISR = "kafka_server_replicamanager_underminisrpartitioncount"
AT_MIN_ISR = "kafka_server_replicamanager_atminisrpartitioncount"
GLOBAL_PARTITIONS = "kafka_controller_kafkacontroller_globalpartitioncount"
UNCLEAN = "kafka_controller_controllerstats_uncleanleaderelections_total"
ELECTIONS = "kafka_controller_controllerstats_leaderelectionrateandtimems"
MAX_LAG = "kafka_server_replicafetchermanager_maxlag"
GROUP_LAG = "kafka_consumergroup_lag"

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
    tmp_path: Path, caplog: pytest.LogCaptureFixture
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

    caplog.set_level("INFO", logger="kafkasim.node.broker")
    address, body, only = asyncio.run(asyncio.wait_for(main(), HTTP_TEST_TIMEOUT_S))
    # metrics.port=0: the log says which port it took.
    assert f"broker 1: metrics on http://{address}/metrics" in caplog.text
    assert samples(body)[ACTIVE_CONTROLLER, frozenset()] == 1
    assert f"# HELP {UNDER_REPLICATED} " in body
    assert set(samples(only)) == {(ACTIVE_CONTROLLER, frozenset())}
    with pytest.raises(OSError):
        get(f"http://{address}/metrics")


# -- what an operator alerts on -----------------------------------------------------------------


def test_messages_in_counts_the_records_appended_per_topic(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "events")
        leader = cluster.brokers[leader_of(cluster, TP)]
        assert value(leader, MESSAGES_IN, topic="events") == 0
        await produce_all(client, TP, [b"a", b"b"])
        assert (await client.produce(TP, [b"c", b"d", b"e"])).ok
        assert value(leader, MESSAGES_IN, topic="events") == 5

    simulate(tmp_path, scenario)


def test_at_and_under_min_isr_follow_the_isr_and_refused_acks_all_produce_fails(
    tmp_path: Path,
) -> None:
    """min.insync.replicas=2 of 3: one follower gone is AtMinIsr, two is UnderMinIsr, where
    acks=all is refused (NOT_ENOUGH_REPLICAS: a failed produce request)."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "events", min_insync_replicas="2")
        leader_id = leader_of(cluster, TP)
        leader = cluster.brokers[leader_id]
        followers = [b for b in cluster.brokers if b != leader_id]
        assert (value(leader, AT_MIN_ISR), value(leader, UNDER_MIN_ISR)) == (0, 0)
        for count, follower in enumerate(followers, start=1):
            cluster.network.isolate(f"broker-{follower}")
            await produce_all(client, TP, [b"x"], acks=1)
            await cluster.wait_for(
                lambda n=3 - count: len(partition_on(cluster, leader_id, TP).isr) == n,
                what="the ISR to shrink",
            )
        assert (value(leader, AT_MIN_ISR), value(leader, UNDER_MIN_ISR)) == (0, 1)
        assert value(leader, FAILED_PRODUCE, topic="events") == 0
        refused = await client.produce(TP, [b"y"], acks=-1, retry=False)
        assert not refused.ok
        assert value(leader, FAILED_PRODUCE, topic="events") == 1
        cluster.network.heal(f"broker-{followers[-1]}")
        await cluster.wait_for(
            lambda: len(partition_on(cluster, leader_id, TP).isr) == 2, what="the ISR to expand"
        )
        assert (value(leader, AT_MIN_ISR), value(leader, UNDER_MIN_ISR)) == (1, 0)

    simulate(tmp_path, scenario)


def test_a_rejected_produce_and_a_failed_fetch_count_as_failed_but_not_a_stale_leader(
    tmp_path: Path,
) -> None:
    """Keyless records to a compacted topic: INVALID_RECORD, a failed produce request. A
    produce to a follower (NOT_LEADER_OR_FOLLOWER: the client's stale view) is not, as in
    Kafka. A read that fails on the leader's log is a failed fetch request."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "events", cleanup_policy="compact")
        leader_id = leader_of(cluster, TP)
        leader = cluster.brokers[leader_id]
        assert not (await client.produce(TP, [b"keyless"], retry=False)).ok
        assert value(leader, FAILED_PRODUCE, topic="events") == 1
        assert (await client.produce(TP, [b"v"], keys=[b"k"])).ok
        follower = next(b for b in cluster.brokers if b != leader_id)
        request = pb.ProduceRequest(acks=1, timeout_ms=1000)
        request.partitions.add(topic="events", partition=0, records=b"")
        answer = await client.transport.call(
            broker_address(follower), proto.METHOD_PRODUCE, request, timeout_s=10
        )
        assert answer.partitions[0].error_code != 0
        assert value(cluster.brokers[follower], FAILED_PRODUCE, topic="events") == 0
        assert value(leader, FAILED_FETCH, topic="events") == 0
        log = partition_on(cluster, leader_id, TP).log

        def broken_read(*args: object, **kwargs: object) -> None:
            raise CorruptRecordError("a damaged segment")

        log.read = broken_read
        with pytest.raises(KafkaError, match="a damaged segment"):
            await client.fetch(TP, 0)
        assert value(leader, FAILED_FETCH, topic="events") >= 1

    simulate(tmp_path, scenario)


def test_the_active_controller_counts_global_partitions_and_leader_elections(
    tmp_path: Path,
) -> None:
    """GlobalPartitionCount on the active controller only; a leader's crash is an election
    (LeaderElectionRateAndTimeMs), not an unclean one."""

    async def scenario(cluster: SimCluster) -> None:
        await create(cluster, "events", partitions=3)
        controller_id = cluster.controller_id()
        controller = cluster.brokers[controller_id]
        for broker_id, broker in cluster.brokers.items():
            expected = 3 if broker_id == controller_id else 0
            assert value(broker, GLOBAL_PARTITIONS) == expected
        before = value(controller, ELECTIONS + "_count")
        victim = next(
            leader_of(cluster, TopicPartition("events", p))
            for p in range(3)
            if leader_of(cluster, TopicPartition("events", p)) != controller_id
        )
        await cluster.crash(victim)
        await cluster.wait_for(
            lambda: value(controller, ELECTIONS + "_count") > before, what="an election"
        )
        assert value(controller, UNCLEAN) == 0

    simulate(tmp_path, scenario)


def test_an_unclean_election_is_counted(tmp_path: Path) -> None:
    """The ISR down to the leader, the leader dies, the out-of-sync follower comes back: with
    unclean.leader.election.enable it leads (UncleanLeaderElectionsPerSec)."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "events", rf=2, unclean_leader_election_enable="true")
        leader_id = leader_of(cluster, TP)
        follower = next(
            b for b in partition_on(cluster, leader_id, TP).assigned_replicas if b != leader_id
        )
        cluster.network.isolate(f"broker-{follower}")
        await produce_all(client, TP, [b"x"], acks=1)
        await cluster.wait_for(
            lambda: partition_on(cluster, leader_id, TP).isr == {leader_id}, what="ISR shrink"
        )
        # (The controller's counters would die with it; with seed 0 it is another broker.)
        assert cluster.controller_id() != leader_id
        controller = cluster.brokers[cluster.controller_id()]
        await cluster.crash(leader_id)
        cluster.network.heal(f"broker-{follower}")
        await cluster.wait_for(lambda: leader_of(cluster, TP) == follower, what="unclean leader")
        assert value(controller, UNCLEAN) == 1

    simulate(tmp_path, scenario)


def test_max_lag_is_how_far_a_catching_up_follower_is_behind(tmp_path: Path) -> None:
    """A follower back from isolation fetches one batch at a time (replica.fetch.max.bytes=1):
    MaxLag is the leader's HW minus its log end, until it caught up (0 again)."""

    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "events")
        leader_id = leader_of(cluster, TP)
        stalled = next(b for b in cluster.brokers if b != leader_id)
        assert value(cluster.brokers[stalled], MAX_LAG) == 0
        cluster.network.isolate(f"broker-{stalled}")
        await produce_all(client, TP, [b"r%d" % i for i in range(40)], acks=1)
        # Out of the ISR, the HW moves on without it: its lag is the HW's distance.
        await cluster.wait_for(
            lambda: stalled not in partition_on(cluster, leader_id, TP).isr, what="ISR shrink"
        )
        lags: list[float] = []
        cluster.network.heal(f"broker-{stalled}")

        def caught_up() -> bool:
            lags.append(value(cluster.brokers[stalled], MAX_LAG))
            return partition_on(cluster, stalled, TP).log_end_offset == 40

        await cluster.wait_for(caught_up, step_s=0.01, what="the follower to catch up")
        assert max(lags) > 0
        await cluster.wait_for(lambda: value(cluster.brokers[stalled], MAX_LAG) == 0, what="no lag")

    simulate(tmp_path, scenario, **{"replica.fetch.max.bytes": 1})


def test_consumer_group_lag_is_high_watermark_minus_committed_offset(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        client = await create(cluster, "events")
        await produce_all(client, TP, [b"r%d" % i for i in range(7)])
        found = None
        for _ in range(50):
            answer = await client.call_any(
                proto.METHOD_FIND_COORDINATOR, pb.FindCoordinatorRequest(key="readers")
            )
            if answer.error_code == 0:
                found = answer
                break
            await cluster.sleep(0.5)
        assert found is not None
        commit = pb.OffsetCommitRequest(group_id="readers", generation_id=-1)
        commit.partitions.add(topic="events", partition=0, committed_offset=3)
        answer = await client.transport.call(
            f"{found.host}:{found.port}", proto.METHOD_OFFSET_COMMIT, commit, timeout_s=60
        )
        assert [p.error_code for p in answer.partitions] == [0]
        coordinator = cluster.brokers[found.node_id]
        lag = {"consumergroup": "readers", "topic": "events", "partition": "0"}
        assert value(coordinator, GROUP_LAG, **lag) == 4
        await produce_all(client, TP, [b"more"])
        # The coordinator's replica learns the new HW with its next fetch (if it follows).
        await cluster.wait_for(lambda: value(coordinator, GROUP_LAG, **lag) == 5, what="lag 5")

    simulate(tmp_path, scenario)


def test_produce_bytes_in_counts_the_appended_partitions_of_a_written_answer() -> None:
    """An answer written in wire form (``apis_replica.EncodedProduceResponse``) is counted from
    its results and the request's partitions: bytes in for each partition answered with a base
    offset, a failed produce for an unexpected error, none for an expected one."""
    metrics = BrokerMetrics(cast(Any, SimpleNamespace(clock=ManualClock())))
    a0, a1, b0 = (TopicPartition(t, p) for t, p in (("a", 0), ("a", 1), ("b", 0)))
    params = produce_params(
        pb.ProduceRequest(
            partitions=[
                pb.ProducePartitionData(topic="a", partition=0, records=b"x" * 10),
                pb.ProducePartitionData(topic="a", partition=1, records=b"y" * 20),
                pb.ProducePartitionData(topic="b", partition=0, records=b"z" * 40),
            ]
        )
    )
    results = [
        ProducePartitionResult(a0, base_offset=5),
        ProducePartitionResult(a1, InvalidRecordError("keyless")),
        ProducePartitionResult(b0, NotLeaderOrFollowerError("moved")),
    ]
    request = pb.ProduceRequest()
    metrics._count_bytes(request, produce_response(results, 1, params.partitions))
    assert metrics.bytes_in == {"a": 10}
    assert metrics.failed_produce == {"a": 1}
    one = produce_response([ProducePartitionResult(b0, base_offset=0)], 2, params.partitions[2:])
    metrics._count_bytes(request, one)
    assert metrics.bytes_in == {"a": 10, "b": 40}
