"""The console's view model: events read from two snapshots, rates, and the view."""

from __future__ import annotations

import pytest

from kafkasim.console.live import parse_metrics
from kafkasim.console.model import (
    DOWN,
    UP,
    BrokerMetrics,
    BrokerState,
    PartitionState,
    Snapshot,
    events_between,
    rates_between,
    view,
)
from kafkasim.faults.history import ReplicaSample


def sample(broker: int, leader: int, hw: int, leo: int, epoch: int = 0) -> ReplicaSample:
    return ReplicaSample(
        0, broker, "t", 0, broker == leader, leader, epoch, hw, leo, (1, 2), (1, 2)
    )


def snap(
    t: int = 0,
    *,
    controller: int = 1,
    leader: int = 1,
    epoch: int = 0,
    isr: tuple[int, ...] = (1, 2),
    down: frozenset[int] = frozenset(),
    registered: frozenset[int] = frozenset({1, 2}),
    replicas: tuple[ReplicaSample, ...] = (),
    metrics: dict[int, BrokerMetrics] | None = None,
) -> Snapshot:
    brokers = tuple(
        BrokerState(
            b,
            f"127.0.0.1:{9000 + b}",
            process=DOWN if b in down else UP,
            registered=b in registered,
        )
        for b in (1, 2)
    )
    part = PartitionState("t", 0, (1, 2), leader, epoch, isr)
    return Snapshot(t, brokers, controller, (part,), replicas, metrics or {})


def test_no_events_for_the_first_snapshot_or_an_unchanged_one() -> None:
    assert events_between(None, snap()) == []
    assert events_between(snap(), snap(1000)) == []


def test_a_leader_crash_reads_as_process_expiry_election_and_isr_shrink() -> None:
    before = snap(0)
    after = snap(
        5000,
        controller=2,
        leader=2,
        epoch=1,
        isr=(2,),
        down=frozenset({1}),
        registered=frozenset({2}),
    )
    events = events_between(before, after)
    kinds = [e.kind for e in events]
    assert kinds == ["controller", "expired", "process", "election", "isr_shrink"]
    assert all(e.time_ms == 5000 for e in events)
    assert "controller moved from broker 1 to broker 2" in events[0].text
    assert "t-0: leader broker 2, leader epoch 1" in events[3].text
    assert "ISR shrank to [2]" in events[4].text


def test_a_restart_reads_as_registration_and_isr_expansion() -> None:
    before = snap(0, isr=(2,), leader=2, down=frozenset({1}), registered=frozenset({2}))
    after = snap(1000, isr=(1, 2), leader=2)
    kinds = [e.kind for e in events_between(before, after)]
    assert kinds == ["registered", "process", "isr_expand"]


def test_an_offline_partition_and_no_controller() -> None:
    events = events_between(snap(0), snap(1000, controller=-1, leader=-1, epoch=1, isr=(1,)))
    texts = [e.text for e in events]
    assert "no controller (broker 1 gone)" in texts
    assert "t-0: leader no leader (offline), leader epoch 1" in texts


def test_a_log_end_moving_back_is_a_truncation() -> None:
    before = snap(0, replicas=(sample(2, 1, 5, 9),))
    after = snap(1000, replicas=(sample(2, 1, 5, 6),))
    (event,) = events_between(before, after)
    assert event.kind == "truncation"
    assert "broker 2: log truncated from 9 to 6" in event.text


def test_rates_between_counters() -> None:
    before = snap(0, metrics={1: BrokerMetrics(10, 20, 40, 100.0, 1000, 500)})
    after = snap(2000, metrics={1: BrokerMetrics(30, 40, 80, 180.0, 3000, 900)})
    (point,) = rates_between(before, after)
    assert (point.produce_per_s, point.fetch_per_s) == (10.0, 10.0)
    assert (point.bytes_in_per_s, point.bytes_out_per_s) == (1000.0, 200.0)
    assert point.latency_ms == pytest.approx(2.0)  # 80 ms over 40 requests


def test_a_restarted_brokers_counters_count_from_zero() -> None:
    before = snap(0, metrics={1: BrokerMetrics(100, 100, 300, 900.0, 10, 10)})
    after = snap(1000, metrics={1: BrokerMetrics(5, 0, 5, 10.0, 0, 0)})
    (point,) = rates_between(before, after)
    assert point.produce_per_s == 5.0
    assert point.latency_ms == 2.0
    assert rates_between(after, after) == []  # no time passed: no rate


def test_view_shows_bars_and_highlights_an_under_replicated_partition() -> None:
    v = view(
        snap(0, isr=(1,), replicas=(sample(1, 1, 5, 8, 3), sample(2, 1, 4, 5, 3))),
        rates=rates_between(
            snap(0, metrics={1: BrokerMetrics()}),
            snap(1000, metrics={1: BrokerMetrics(4, 0, 4, 8.0, 0, 0)}),
        ),
    )
    (topic,) = v["topics"]
    (p,) = topic["partitions"]
    assert p["under_replicated"] and not p["offline"]
    assert p["max_leo"] == 8
    assert [(b["broker"], b["hw"], b["leo"], b["in_isr"], b["leader"]) for b in p["bars"]] == [
        (1, 5, 8, True, True),
        (2, 4, 5, False, False),
    ]
    assert v["summary"] == {
        "brokers": 2,
        "brokers_up": 2,
        "partitions": 1,
        "under_replicated": 1,
        "offline": 0,
    }
    assert [b["controller"] for b in v["brokers"]] == [True, False]
    assert v["brokers"][0]["leaderships"] == 1
    assert v["rates"]["1"]["produce"] == [4.0]
    assert v["rates"]["1"]["latency"] == [2.0]


def test_a_replica_that_did_not_answer_has_an_empty_bar() -> None:
    v = view(snap(0, leader=-1, isr=(1,)))
    (p,) = v["topics"][0]["partitions"]
    assert p["offline"] and not p["under_replicated"]
    assert p["bars"][0]["leo"] is None


def test_view_timeline_is_newest_first() -> None:
    events = events_between(snap(0), snap(1000, leader=2, epoch=1))
    events += events_between(snap(1000, leader=2, epoch=1), snap(2000, leader=1, epoch=2))
    assert [e["time_ms"] for e in view(snap(2000), events)["timeline"]] == [2000, 1000]


def test_a_bad_process_state_is_refused() -> None:
    with pytest.raises(ValueError, match="process state 'gone'"):
        BrokerState(1, "a:1", process="gone")


def test_parse_metrics_reads_the_brokers_prometheus_counters() -> None:
    text = "\n".join(
        [
            "# TYPE kafka_network_requestmetrics_requests counter",
            'kafka_network_requestmetrics_requests_total{request="Produce"} 7.0',
            'kafka_network_requestmetrics_requests_total{request="Fetch"} 3.0',
            'kafka_network_requestmetrics_requests_total{request="Metadata"} 2.0',
            "# TYPE kafka_network_requestmetrics_totaltimems histogram",
            'kafka_network_requestmetrics_totaltimems_bucket{request="Produce",le="+Inf"} 7.0',
            'kafka_network_requestmetrics_totaltimems_sum{request="Produce"} 21.0',
            'kafka_network_requestmetrics_totaltimems_count{request="Produce"} 7.0',
            "# TYPE kafka_server_brokertopicmetrics_bytesin counter",
            'kafka_server_brokertopicmetrics_bytesin_total{topic="t"} 700.0',
            "# TYPE kafka_server_brokertopicmetrics_bytesout counter",
            'kafka_server_brokertopicmetrics_bytesout_total{topic="t",fetcher="consumer"} 70.0',
            "",
        ]
    )
    assert parse_metrics(text) == BrokerMetrics(7, 3, 12, 21.0, 700, 70)
