"""Exactly-once consume-transform-produce with confluent-kafka against a 3-broker kafkasim
cluster (``tests.interop.eos_loop`` is the loop and what it records).

The input topic (3 partitions, RF 3, ``min.insync.replicas=2``) holds 3,000 numbered records.
Each test runs the loop into its own output topic with its own group and transactional id:

* with no failure: exactly once, and the loop's transactions per second and
  ``commit_transaction`` latency (p50/p99) printed;
* across a SIGKILL of a broker just before a commit (the transaction coordinator of the
  loop's transactional id, or the leader of an output partition), the broker started again
  meanwhile. Never the group's coordinator: librdkafka 2.16's ``send_offsets_to_transaction``
  then hangs past its timeout (see ``victim_and_ids``);
* with the producer's process SIGKILLed while its transaction is open (records delivered,
  offsets sent, no commit) and a new instance with the same ``transactional.id`` and group
  taking over: the zombie's transaction is aborted, its records stay in the log but no
  read_committed consumer sees them.

Each run's history (the loop's sends, offsets and commits, a read_committed read of the whole
output, the group's offsets read back) is judged by the history checker: nothing committed lost,
no aborted or uncommitted read, no committed transaction partly visible, no offsets committed
without their writes or writes without their offsets, no exactly-once duplicate. The same is
then asserted directly: every input record once in the output, the group's committed offsets at
the input's end offsets. The replicas' logs are not captured for the checker: the chaos
runner's log reader takes transaction markers for records, so the read_committed read is the
final state (the checker's rule for a history without logs)."""

from __future__ import annotations

import os
import select
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CkPartition
from confluent_kafka.admin import AdminClient

from kafkasim.cluster.local import LocalCluster
from kafkasim.faults.checker import CheckReport, check
from kafkasim.faults.history import READ_UNCOMMITTED, FaultEvent, History, Op, OpType
from kafkasim.node.group_records import OFFSETS_TOPIC
from kafkasim.node.group_records import partition_for as group_partition
from kafkasim.node.txn_log import partition_for as txn_partition
from tests.cli_run import local_cluster
from tests.interop.eos_loop import INPUT, PARTITIONS, STALLED, EosLoop, OpLog, read_op
from tests.interop.kafkasim_side import DEADLINE_S, create_topic

COUNT = 3000
TXN_TOPIC, TXN_PARTITIONS, OFFSETS_PARTITIONS = "__transaction_state", 5, 50
TOPIC_CONFIGS = {"min.insync.replicas": "2"}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    props: dict[str, object] = {"transaction.state.log.num.partitions": TXN_PARTITIONS}
    with local_cluster(tmp_path_factory.mktemp("interop-eos"), 3, props) as cluster:
        create_topic(cluster, INPUT, partitions=PARTITIONS, configs=TOPIC_CONFIGS)
        fill_input(cluster)
        create_internal_topics(cluster)
        yield cluster


def fill_input(cluster: LocalCluster) -> None:
    """``in-00000`` … to partition ``n % 3``, idempotently, every one acknowledged."""
    producer = Producer(
        {"bootstrap.servers": cluster.kafka_bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    failed: list[KafkaError] = []
    for n in range(COUNT):
        producer.produce(
            INPUT,
            f"in-{n:05d}".encode(),
            partition=n % PARTITIONS,
            on_delivery=lambda err, _msg: failed.append(err) if err is not None else None,
        )
    assert producer.flush(DEADLINE_S) == 0 and not failed, failed


def create_internal_topics(cluster: LocalCluster) -> None:
    """``__transaction_state`` and ``__consumer_offsets``, created on first use: a transactional
    producer's ``init_transactions`` and a group's offset lookup."""
    producer = Producer({"bootstrap.servers": cluster.kafka_bootstrap, "transactional.id": "warm"})
    producer.init_transactions(DEADLINE_S)
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "warm"})
    try:
        consumer.committed([CkPartition(INPUT, 0)], DEADLINE_S)
    finally:
        consumer.close()


def expected_output() -> set[str]:
    return {f"out-in-{n:05d}" for n in range(COUNT)}


def run_loop(loop: EosLoop) -> None:
    try:
        loop.run(DEADLINE_S * 3)
    finally:
        loop.close()


# -- reading back ------------------------------------------------------------------------------


def read_output(
    cluster: LocalCluster, topic: str, isolation: str, want: int, log: OpLog
) -> list[Op]:
    """Every record of ``topic``'s partitions from the beginning, as read ops: read until at
    least ``want`` records were read and every partition reached its end since its last record
    (the last markers are written after the last commit returned: an end reached before them is
    not the end)."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": f"reader-{topic}-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": 10,
        }
    )
    process = f"reader-{isolation}"
    try:
        consumer.assign([CkPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        reads: list[Op] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + DEADLINE_S
        while len(reads) < want or len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"{isolation}: read {len(reads)} of {want}"
            message = consumer.poll(0.5)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                at_end.add(message.partition() or 0)
                continue
            at_end.discard(message.partition() or 0)
            op = read_op(process, log.now_ms(), message)
            if isolation == READ_UNCOMMITTED:
                op = Op(op.type, op.f, op.process, op.time_ms, op.topic, op.partition, op.value,
                        offset=op.offset, isolation=READ_UNCOMMITTED)  # fmt: skip
            reads.append(op)
        return reads
    finally:
        consumer.close()


def group_offsets(cluster: LocalCluster, group: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": group})
    try:
        wanted = [CkPartition(INPUT, p) for p in range(PARTITIONS)]
        return {tp.partition: tp.offset for tp in consumer.committed(wanted, DEADLINE_S)}
    finally:
        consumer.close()


def input_ends(cluster: LocalCluster) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": cluster.kafka_bootstrap, "group.id": "ends"})
    try:
        return {
            p: consumer.get_watermark_offsets(CkPartition(INPUT, p), DEADLINE_S)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def judge(
    cluster: LocalCluster, output: str, group: str, log: OpLog, history: History, *, path: Path
) -> tuple[CheckReport, list[Op], str]:
    """Read the output (read_committed) and the group's offsets into ``history``; the checker's
    report, the reads and the verdict text."""
    reads = read_output(cluster, output, "read_committed", COUNT, log)
    history.ops.extend(log.ops)
    history.ops.extend(reads)
    for partition, offset in group_offsets(cluster, group).items():
        history.final_group_offsets[(group, INPUT, partition)] = offset
    history.write(path)  # ``kafkasim check`` reads it again
    report = check(history)
    assert report.transactions is not None
    outcomes = Counter(f"{op.f} {op.type.value}" for op in history.ops if op.txn is not None)
    verdict = "\n".join([*report.verdict_lines(), f"ops: {dict(outcomes)}", f"history: {path}"])
    return report, reads, verdict


def assert_exactly_once(
    cluster: LocalCluster, group: str, report: CheckReport, reads: list[Op], verdict: str
) -> None:
    assert report.ok, verdict
    txns = report.transactions
    assert txns is not None
    assert (report.lost, report.duplicated) == (0, 0), verdict
    assert not (txns.aborted_reads or txns.intermediate_reads or txns.partial), verdict
    assert not (txns.offsets_without_writes or txns.writes_without_offsets), verdict
    assert not txns.duplicates, verdict
    # The same, directly: each input record once in the output, the group at the input's end.
    values = Counter(op.value for op in reads)
    assert set(values) == expected_output(), verdict
    assert set(values.values()) == {1}, [v for v, n in values.items() if n > 1][:10]
    assert group_offsets(cluster, group) == input_ends(cluster) == {0: 1000, 1: 1000, 2: 1000}


def test_exactly_once_with_no_failure(kafka_cluster: LocalCluster, tmp_path: Path) -> None:
    output, group = "eos-out-calm", "eos-calm"
    create_topic(kafka_cluster, output, partitions=PARTITIONS, configs=TOPIC_CONFIGS)
    log = OpLog()
    loop = EosLoop(kafka_cluster.kafka_bootstrap, "eos-calm", group, output, log)
    run_loop(loop)
    seconds = loop.last_commit - loop.first_begin  # from the first transaction to the last
    history = History(meta={"test": "eos no failure"})
    report, reads, verdict = judge(
        kafka_cluster, output, group, log, history, path=tmp_path / "h.jsonl"
    )
    assert_exactly_once(kafka_cluster, group, report, reads, verdict)
    assert loop.aborted == 0 and loop.producers == 1
    ms = sorted(loop.commit_ms)
    print(
        f"\nexactly-once loop, no failure: {len(ms)} transactions of up to "
        f"{COUNT // len(ms) if ms else 0}+ records in {seconds:.2f} s "
        f"({len(ms) / seconds:.1f} transactions/s, {COUNT / seconds:.0f} records/s); "
        f"commit_transaction p50 {statistics.median(ms):.1f} ms, "
        f"p99 {ms[min(len(ms) - 1, int(0.99 * len(ms)))]:.1f} ms, max {ms[-1]:.1f} ms; "
        f"send_offsets_to_transaction p50 {statistics.median(loop.offsets_ms):.1f} ms"
    )


# -- a broker killed -------------------------------------------------------------------------


def leader(cluster: LocalCluster, topic: str, partition: int) -> int:
    admin = AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})
    topics = admin.list_topics(topic, timeout=DEADLINE_S).topics
    return int(topics[topic].partitions[partition].leader)


def group_coordinator(cluster: LocalCluster, group: str) -> int:
    return leader(cluster, OFFSETS_TOPIC, group_partition(group, OFFSETS_PARTITIONS))


def transaction_coordinator(cluster: LocalCluster, transactional_id: str) -> int:
    return leader(cluster, TXN_TOPIC, txn_partition(transactional_id, TXN_PARTITIONS))


def victim_and_ids(cluster: LocalCluster, victim: str) -> tuple[int, str, str]:
    """The broker to kill, the transactional id and the group: the first id whose victim is
    not the group's coordinator. librdkafka's ``send_offsets_to_transaction`` waits forever,
    past its timeout, when the group coordinator it cached left the metadata (a killed broker
    does): librdkafka issues #5456 and #5511, open in 2.16 (the group coordinator as the victim
    hung this test in 2.16.0). Kafka lists only live brokers in Metadata too."""
    slug = victim.split(maxsplit=1)[0]
    group = f"eos-{slug}"
    coordinator = group_coordinator(cluster, group)
    for n in range(50):
        tid = f"eos-{slug}-{n}"
        if victim == "transaction coordinator":
            broker = transaction_coordinator(cluster, tid)
        else:
            output = f"eos-out-{slug}"
            broker = next(
                b for p in range(PARTITIONS) if (b := leader(cluster, output, p)) != coordinator
            )
        if broker != coordinator:
            return broker, tid, group
    raise AssertionError(f"every candidate's {victim} coordinates group {group}")


KILL_AT = 8  # the transaction before whose commit the broker is killed


class Killer:
    """Kills the victim broker just before transaction KILL_AT commits and starts it again
    in a thread (the loop goes on meanwhile)."""

    def __init__(self, cluster: LocalCluster, victim: int, log: OpLog) -> None:
        self.cluster, self.victim, self.log = cluster, victim, log
        self.killed: int | None = None
        self.kill_ms = -1
        self.thread: threading.Thread | None = None
        self.failures: list[BaseException] = []

    def __call__(self, txn_number: int) -> None:
        if txn_number != KILL_AT or self.killed is not None:
            return
        self.killed = self.victim
        self.cluster.kill(self.killed)
        self.kill_ms = self.log.now_ms()
        self.thread = threading.Thread(target=self.restart, args=(self.killed,))
        self.thread.start()

    def restart(self, broker_id: int) -> None:
        try:
            self.cluster.start_broker(broker_id)
            self.cluster.wait_serving(broker_id)
        except BaseException as e:  # reported by the test, which joins this thread
            self.failures.append(e)

    def join(self) -> None:
        assert self.thread is not None, "the broker was never killed"
        self.thread.join(DEADLINE_S * 2)
        assert not self.thread.is_alive() and not self.failures, self.failures


@pytest.mark.parametrize("victim", ["transaction coordinator", "output partition leader"])
def test_exactly_once_across_a_broker_kill(
    kafka_cluster: LocalCluster, tmp_path: Path, victim: str
) -> None:
    output = f"eos-out-{victim.split(maxsplit=1)[0]}"
    create_topic(kafka_cluster, output, partitions=PARTITIONS, configs=TOPIC_CONFIGS)
    broker, tid, group = victim_and_ids(kafka_cluster, victim)
    log = OpLog()
    killer = Killer(kafka_cluster, broker, log)
    loop = EosLoop(kafka_cluster.kafka_bootstrap, tid, group, output, log, before_commit=killer)
    run_loop(loop)
    killer.join()
    history = History(meta={"test": f"eos across a {victim} kill"})
    assert killer.killed is not None
    history.faults.append(FaultEvent(killer.kill_ms, "crash", f"broker {killer.killed} ({victim})"))
    report, reads, verdict = judge(
        kafka_cluster, output, group, log, history, path=tmp_path / "h.jsonl"
    )
    assert_exactly_once(kafka_cluster, group, report, reads, verdict)
    # The kill fell inside the stream: transactions committed on both sides of it.
    commits = [op.time_ms for op in history.ops if op.f == "commit" and op.type is OpType.OK]
    assert min(commits) < killer.kill_ms < max(commits), verdict
    print(
        f"\n{victim} (broker {killer.killed}) killed before transaction {KILL_AT} committed: "
        f"{len(commits)} commits, {loop.aborted} aborted or fenced, {loop.producers} producers; "
        f"slowest commit {max(loop.commit_ms):.0f} ms"
    )


# -- a zombie producer -------------------------------------------------------------------------

STALL_AT = 5  # the zombie's transaction left open


def start_zombie(cluster: LocalCluster, tid: str, group: str, output: str, *, path: Path,
                 began: float) -> subprocess.Popen[str]:  # fmt: skip
    """The loop in a child process, stalled in transaction STALL_AT (records delivered,
    offsets sent, no commit)."""
    argv = [cluster.kafka_bootstrap, tid, group, output, str(path), str(STALL_AT), repr(began)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.interop.eos_loop", *argv],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], DEADLINE_S * 2)
    line = child.stdout.readline().strip() if ready else ""
    if line != STALLED:
        child.kill()
        child.wait()
        child.stdout.close()
        raise AssertionError(f"the zombie never stalled (said {line!r}, exit {child.returncode})")
    return child


def test_a_zombie_producers_open_transaction_is_aborted_by_its_successor(
    kafka_cluster: LocalCluster, tmp_path: Path
) -> None:
    output, group, tid = "eos-out-zombie", "eos-zombie", "eos-zombie"
    create_topic(kafka_cluster, output, partitions=PARTITIONS, configs=TOPIC_CONFIGS)
    log = OpLog()
    zombie_path = tmp_path / "zombie.jsonl"
    child = start_zombie(kafka_cluster, tid, group, output, path=zombie_path, began=log.began)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert child.stdout is not None
    child.stdout.close()
    zombie_ops = History.read(zombie_path).ops
    open_txn = f"{tid}:{STALL_AT}"
    zombie_writes = {
        (op.partition, op.offset, op.value)
        for op in zombie_ops
        if op.txn == open_txn and op.f == "send" and op.type is OpType.OK
    }
    assert zombie_writes, "the zombie's open transaction wrote nothing"
    assert not [op for op in zombie_ops if op.type is not OpType.OK and op.f == "abort"]

    successor = EosLoop(
        kafka_cluster.kafka_bootstrap, tid, group, output, log, first_txn=STALL_AT + 1,
        process="successor",
    )  # fmt: skip
    run_loop(successor)
    history = History(meta={"test": "eos zombie producer"})
    history.ops.extend(zombie_ops)
    history.faults.append(FaultEvent(0, "crash", "the zombie producer's process (SIGKILL)"))
    report, reads, verdict = judge(
        kafka_cluster, output, group, log, history, path=tmp_path / "h.jsonl"
    )
    assert_exactly_once(kafka_cluster, group, report, reads, verdict)
    # The zombie's records are in the log (read_uncommitted sees them, where it wrote them),
    # and no read_committed consumer ever saw one of them there.
    uncommitted = read_output(kafka_cluster, output, READ_UNCOMMITTED, COUNT, log)
    written = {(op.partition, op.offset, op.value) for op in uncommitted}
    assert zombie_writes <= written
    seen = {(op.partition, op.offset, op.value) for op in reads}
    assert not zombie_writes & seen
    # Its values were committed once, later, by the successor.
    assert {v for _, _, v in zombie_writes} <= {op.value for op in reads}
