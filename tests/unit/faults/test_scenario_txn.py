"""The scenario language's transactions: transactional producers, read_committed consumers,
transformers and ``txn-coordinator:ID`` targets read, written back, checked (each mistake
named by its key path) and resolved."""

from __future__ import annotations

import random

import pytest

from kafkasim.faults.history import ReplicaSample
from kafkasim.faults.reading import parse
from kafkasim.faults.resolve import ClusterView, resolve
from kafkasim.faults.scenario import Fault, ScenarioError, TargetKind, parse_target
from kafkasim.faults.writing import dump
from kafkasim.node.txn_log import TRANSACTION_STATE_TOPIC, partition_for

BASE = """
name = "t"
expect = "safe"
[cluster]
brokers = 3
[[cluster.topics]]
name = "events"
[[cluster.topics]]
name = "out"
[workload]
duration_s = 20.0
[[workload.producers]]
name = "p1"
topic = "events"
rate = 50.0
{producer}
[[workload.consumers]]
name = "c1"
topic = "events"
{consumer}
{rest}
"""

TXN = "transactional = true\ntransaction_records = 4\nabort_every = 3"


def scenario_text(producer: str = TXN, consumer: str = "", rest: str = "") -> str:
    return BASE.format(producer=producer, consumer=consumer, rest=rest)


def test_a_transactional_scenario_reads_and_writes_back_unchanged() -> None:
    rest = """
[[workload.transformers]]
name = "t1"
input = "events"
output = "out"
abort_every = 2
[[faults]]
at_s = 5.0
action = "crash"
target = "txn-coordinator:p1"
duration_s = 8.0
"""
    text = scenario_text(
        TXN + "\ntransaction_timeout_ms = 3000\npause_at_s = 4.0\npause_s = 2.0",
        'isolation = "read_committed"',
        rest,
    )
    s = parse(text, source="t.toml")
    p = s.workload.producers[0]
    assert (p.transactional, p.transaction_records, p.abort_every, p.txn_id) == (True, 4, 3, "p1")
    assert p.transaction_timeout_ms == 3000 and p.pause_at_s == 4.0
    assert s.workload.consumers[0].isolation == "read_committed"
    t = s.workload.transformers[0]
    assert (t.group_id, t.txn_id, t.abort_every) == ("t1", "t1", 2)
    assert s.workload.transactional
    assert parse(dump(s), source="dumped") == s


@pytest.mark.parametrize(
    ("producer", "consumer", "rest", "path", "message"),
    [
        ("transactional = true\nidempotent = false", "", "", "workload.producers[0].idempotent",
         "transactional producer is idempotent"),
        ("abort_every = 2", "", "", "workload.producers[0].abort_every",
         "only for a transactional producer"),
        ("pause_at_s = 3.0\npause_s = 1.0", "", "", "workload.producers[0].pause_at_s",
         "only for a transactional producer"),
        ("transactional = true\ntransaction_records = 0", "", "",
         "workload.producers[0].transaction_records", "out of range"),
        (TXN + "\npause_s = 2.0", "", "", "workload.producers[0].pause_s", "needs pause_at_s"),
        (TXN + "\ntransaction_timeout_ms = 1000000", "", "",
         "workload.producers[0].transaction_timeout_ms", "transaction.max.timeout.ms"),
        ('transactional = true\nconfig = { "transactional.id" = "x" }', "", "",
         'workload.producers[0].config."transactional.id"', "set the producer's transactional"),
        (TXN, 'isolation = "committed"', "", "workload.consumers[0].isolation", "read_committed"),
        (TXN, "", '[[workload.transformers]]\nname = "t1"\ninput = "events"\noutput = "events"',
         "workload.transformers[0].output", "the input topic"),
        (TXN, "", '[[workload.transformers]]\nname = "t1"\ninput = "nope"\noutput = "out"',
         "workload.transformers[0].input", "not declared"),
        (TXN, "", '[[workload.transformers]]\nname = "t1"\ninput = "events"\noutput = "out"\n'
         'transactional_id = "p1"', "workload.transformers[0].transactional_id",
         "another client's"),
        (TXN, "", '[[faults]]\nat_s = 1.0\naction = "crash"\ntarget = "txn-coordinator:zz"',
         "faults[0].target", "no transactional client uses id 'zz'"),
        (TXN, "", 'client = "confluent-kafka"', "", ""),
    ],
)  # fmt: skip
def test_transaction_mistakes_are_named_by_their_key(
    producer: str, consumer: str, rest: str, path: str, message: str
) -> None:
    if rest.startswith("client"):  # a real client drives no transactions
        text = scenario_text(producer, consumer).replace(
            "duration_s = 20.0", 'duration_s = 20.0\nclient = "confluent-kafka"'
        )
        path, message = "workload.producers[0].transactional", "kafkasim's own client only"
    else:
        text = scenario_text(producer, consumer, rest)
    with pytest.raises(ScenarioError) as caught:
        parse(text, source="t.toml")
    assert caught.value.path == path
    assert message in caught.value.reason


def test_the_txn_coordinator_target_parses_and_prints_back() -> None:
    target = parse_target("txn-coordinator:orders.tx-1")
    assert target.kind is TargetKind.TXN_COORDINATOR
    assert target.transactional_id == "orders.tx-1"
    assert str(target) == "txn-coordinator:orders.tx-1"
    with pytest.raises(ScenarioError, match="transactional id"):
        parse_target("txn-coordinator:")
    with pytest.raises(ScenarioError, match="transactional id"):
        parse_target("txn-coordinator:a b")


def _state(broker: int, partition: int, leader: int, epoch: int) -> ReplicaSample:
    return ReplicaSample(0, broker, TRANSACTION_STATE_TOPIC, partition, broker == leader,
                         leader, epoch, 0, 0, (1, 2, 3), (1, 2, 3))  # fmt: skip


def test_the_txn_coordinator_resolves_to_the_leader_of_the_ids_state_partition() -> None:
    mine = partition_for("tx", 5)
    other = (mine + 1) % 5
    replicas = (
        _state(1, other, 1, 0),
        _state(2, mine, 2, 1),
        _state(3, mine, 3, 2),  # the newest epoch wins
    )
    fault = Fault(1.0, "crash", "txn-coordinator:tx")
    view = ClusterView((1, 2, 3), replicas=replicas, txn_partitions=5)
    assert resolve(fault, view, random.Random(1)) == [3]
    # Counted over another number of partitions, the id maps elsewhere: nobody leads it here.
    lone = ClusterView((1, 2, 3), replicas=(_state(1, other, 1, 0),), txn_partitions=5)
    assert resolve(fault, lone, random.Random(1)) == []
