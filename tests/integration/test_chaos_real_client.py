"""A failure run whose workload is a real Kafka client (issue 13, point 6): the catalog's
leader-crash, shortened, on ZooKeeper and three broker processes, its producer and consumer
librdkafka's (confluent-kafka, idempotent, acks=all) on the brokers' Kafka listeners, through
``kafkasim chaos run FILE --client confluent-kafka``. The history holds the real client's
events and the same checker as for kafkasim's own client judges it: nothing acknowledged lost,
nothing duplicated, a new leader elected.

About 30 s: a few seconds of start-up, 14 s of workload (the leader killed at 3 s, back at
11 s: a new leader after the 6 s ZooKeeper session timeout), 6 s of settling, and a clean stop
(the controlled shutdown's retry backoff shortened to 0.5 s).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kafkasim.faults import checker
from kafkasim.faults.history import History, OpType
from kafkasim.faults.reading import find, load
from kafkasim.faults.scenario import Scenario
from kafkasim.faults.validation import check
from kafkasim.faults.writing import dump
from tests.cli_run import kafkasim
from tests.integration.test_chaos import leader_epochs, needs_zookeeper


def short_leader_crash() -> Scenario:
    """The catalog's leader-crash in 20 s: the same fault on the same target, earlier and
    shorter; the client is left to the command line."""
    base = load(find("leader-crash"))
    (fault,) = base.faults
    chosen = dataclasses.replace(
        base,
        cluster=dataclasses.replace(
            base.cluster,
            broker_config={
                **base.cluster.broker_config,
                "controlled.shutdown.retry.backoff.ms": 500,
            },
        ),
        workload=dataclasses.replace(base.workload, duration_s=14.0, settle_s=6.0),
        faults=(dataclasses.replace(fault, at_s=3.0, duration_s=8.0),),
        seed_faults=None,
    )
    check(chosen)
    return chosen


@pytest.mark.slow
def test_librdkafka_across_a_leader_kill_is_judged_safe(tmp_path: Path) -> None:
    needs_zookeeper()
    chosen = short_leader_crash()
    assert chosen.workload.client == "kafkasim"  # the option below chooses the client
    path = tmp_path / "leader-crash-short.toml"
    path.write_text(dump(chosen))
    history_path = tmp_path / "history.jsonl"
    done = kafkasim(
        "chaos", "run", str(path), "--client", "confluent-kafka",
        "--dir", str(tmp_path / "cluster"), "--history", str(history_path),
        timeout=170,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        "scenario leader-crash (expect: safe), local processes, workload by confluent-kafka"
    )
    assert any("workload started (1 producers, 1 consumers, by confluent-kafka" in x for x in lines)
    assert any(x.startswith("VERDICT: SAFE") for x in lines), done.stdout

    history = History.read(history_path)
    assert history.meta["client"] == "confluent-kafka"
    report = checker.check(history)
    assert report.ok, report.verdict_lines()
    assert (report.lost, report.acknowledged > 500) == (0, True)
    assert len(leader_epochs(history)) >= 2, "no new leader was elected"

    # The producer's events are librdkafka's delivery reports: every acknowledged send has
    # its offset, and no value was acknowledged twice.
    sends = [op for op in history.ops if op.process == "p1"]
    acked = [op for op in sends if op.type is OpType.OK]
    assert len(acked) == report.acknowledged
    assert all(op.offset is not None and op.idempotent for op in acked)
    assert len({op.value for op in acked}) == len(acked)
    # The consumer's reads are librdkafka's messages (no fetch HW: the client does not tell)
    # and cover every acknowledged send.
    reads = [op for op in history.ops if op.process == "c1"]
    assert reads and all(op.f == "read" and op.hw is None for op in reads)
    assert {op.value for op in acked} <= {op.value for op in reads}
