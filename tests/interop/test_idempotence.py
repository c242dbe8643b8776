"""librdkafka's idempotent producer (``enable.idempotence=true``, ``acks=all``) across a leader
SIGKILL: 5,000 numbered records to one partition (RF 3, ``min.insync.replicas=2``) while the
partition's leader is killed and started again. Every send and every delivery report goes into
a history (``faults.history``, Jepsen's model, as the chaos runner records it); the partition is
read back with confluent-kafka, every replica's log is read from disk once the three agree, and
the history checker (``faults.checker``) judges: nothing acknowledged lost, no duplicate, the
order kept, the invariants held."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer
from confluent_kafka import TopicPartition as CkPartition

from kafkasim import proto
from kafkasim.cluster.chaos import read_replica_log
from kafkasim.cluster.local import LocalCluster
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.faults.checker import check
from kafkasim.faults.history import FaultEvent, History, Op, OpType, ReplicaSample
from kafkasim.proto import kafkasim_pb2 as pb
from tests.interop.kafkasim_side import DEADLINE_S, create_topic

TOPIC = "idempotent"
COUNT = 5000
BURST = 50  # records produced between two polls of 20 ms: 5,000 records over a few seconds
KILL_AT = COUNT // 3  # the leader is killed once this many records were produced
PRODUCER = "librdkafka-1"


class Recorder:
    """The history of one run; times in ms since it began. librdkafka calls the delivery
    report from ``poll``/``flush`` in the producing thread, so nothing here is shared."""

    def __init__(self) -> None:
        self.history = History(meta={"test": __name__, "producer": "confluent-kafka"})
        self.began = time.monotonic()

    def now_ms(self) -> int:
        return int((time.monotonic() - self.began) * 1000)

    def send(self, type_: OpType, value: str, offset: int | None = None, error: str = "") -> None:
        self.history.add(
            Op(
                type=type_,
                f="send",
                process=PRODUCER,
                time_ms=self.now_ms(),
                topic=TOPIC,
                partition=0,
                value=value,
                offset=offset,
                error=error or None,
                idempotent=True,
                acks="all",
            )
        )

    def delivered(self, err: KafkaError | None, msg: Message) -> None:
        value = (msg.value() or b"").decode()
        if err is None:
            self.send(OpType.OK, value, offset=msg.offset())
        else:
            # librdkafka does not say whether a failed record was written: unknown.
            self.send(OpType.INFO, value, error=str(err))

    def read(self, offset: int, value: str, hw: int) -> None:
        self.history.add(
            Op(OpType.OK, "read", "reader", self.now_ms(), TOPIC, 0, value, offset=offset, hw=hw)
        )


def leader_of(bootstrap: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "metadata"})
    try:
        return int(consumer.list_topics(TOPIC, timeout=30).topics[TOPIC].partitions[0].leader)
    finally:
        consumer.close()


def restart(cluster: LocalCluster, broker_id: int, failures: list[BaseException]) -> None:
    try:
        cluster.start_broker(broker_id)
        cluster.wait_serving(broker_id)
    except BaseException as e:  # reported by the test, which joins this thread
        failures.append(e)


def _wait_for_an_acknowledgement(producer: Producer, recorder: Recorder) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not any(op.type is OpType.OK and op.f == "send" for op in recorder.history.ops):
        assert time.monotonic() < deadline, "no record was acknowledged before the kill"
        producer.poll(0.05)


def produce_across_a_leader_kill(cluster: LocalCluster, recorder: Recorder) -> int:
    """Produce COUNT records, SIGKILL the leader at KILL_AT and start it again meanwhile;
    the killed broker's id."""
    producer = Producer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 120_000,  # outlasts the election after the kill
        }
    )
    leader = leader_of(cluster.kafka_bootstrap)
    failures: list[BaseException] = []
    restarter: threading.Thread | None = None
    for n in range(COUNT):
        value = f"r-{n:05d}"
        recorder.send(OpType.INVOKE, value)
        producer.produce(TOPIC, value.encode(), partition=0, on_delivery=recorder.delivered)
        if n == KILL_AT:
            # The kill must fall inside the stream of acknowledgements, whatever the set-up
            # costs (InitProducerId, metadata): a CI run killed the leader at 750 ms, before
            # the first acknowledgement.
            _wait_for_an_acknowledgement(producer, recorder)
            cluster.kill(leader)
            recorder.history.faults.append(
                FaultEvent(recorder.now_ms(), "crash", f"broker {leader} (leader)")
            )
            restarter = threading.Thread(target=restart, args=(cluster, leader, failures))
            restarter.start()
        if n % BURST == BURST - 1:
            producer.poll(0.02)
    assert producer.flush(DEADLINE_S * 2) == 0, "records still undelivered"
    assert restarter is not None
    restarter.join(DEADLINE_S * 2)
    assert not restarter.is_alive() and not failures, failures
    return leader


def read_back(cluster: LocalCluster, recorder: Recorder) -> int:
    """Read the whole partition with confluent-kafka into the history; its high watermark."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.kafka_bootstrap,
            "group.id": "reader",
            "enable.auto.commit": 0,
        }
    )
    try:
        tp = CkPartition(TOPIC, 0)
        _, hw = consumer.get_watermark_offsets(tp, timeout=DEADLINE_S)
        consumer.assign([CkPartition(TOPIC, 0, OFFSET_BEGINNING)])
        position = 0
        deadline = time.monotonic() + DEADLINE_S
        while position < hw and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            recorder.read(msg.offset(), (msg.value() or b"").decode(), hw)
            position = msg.offset() + 1
        assert position == hw, f"read up to offset {position} of {hw}"
        return hw
    finally:
        consumer.close()


def final_logs(cluster: LocalCluster, recorder: Recorder, hw: int) -> bool:
    """Every replica's log from disk, once each holds the ``hw`` records below the high
    watermark (the restarted broker catches up as a follower); False if one never did."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        logs = {}
        for broker_id, broker in cluster.brokers.items():
            entries, problem = read_replica_log(broker.data_dir / "logs" / f"{TOPIC}-0")
            if problem is None:
                logs[broker_id] = entries
        caught_up = all(
            [o for o, _ in logs.get(b, []) if o < hw] == list(range(hw)) for b in cluster.brokers
        )
        if caught_up or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for broker_id, entries in logs.items():
        recorder.history.final_logs[(TOPIC, 0, broker_id)] = entries
    recorder.history.final_hw[(TOPIC, 0)] = hw
    return caught_up


def replica_samples(cluster: LocalCluster, recorder: Recorder) -> None:
    """Each broker's view of the partition now (leader, epoch, HW, ISR), as the chaos runner
    samples it: the checker compares the final ISR's logs with the leader's."""

    async def main() -> None:
        transport = GrpcTransport()
        try:
            for broker in cluster.brokers.values():
                response = await transport.call(
                    broker.address,
                    proto.METHOD_DESCRIBE_REPLICAS,
                    pb.DescribeReplicasRequest(),
                    timeout_s=10,
                )
                assert isinstance(response, pb.DescribeReplicasResponse)
                recorder.history.samples.extend(
                    ReplicaSample.from_state(recorder.now_ms(), r)
                    for r in response.replicas
                    if r.topic == TOPIC
                )
        finally:
            await transport.close()

    asyncio.run(asyncio.wait_for(main(), DEADLINE_S))


def test_idempotent_librdkafka_producer_across_a_leader_kill_loses_and_duplicates_nothing(
    kafka_cluster: LocalCluster, tmp_path: Path
) -> None:
    create_topic(kafka_cluster, TOPIC, configs={"min.insync.replicas": "2"})
    recorder = Recorder()
    killed = produce_across_a_leader_kill(kafka_cluster, recorder)
    hw = read_back(kafka_cluster, recorder)
    caught_up = final_logs(kafka_cluster, recorder, hw)
    replica_samples(kafka_cluster, recorder)

    saved = tmp_path / "history.jsonl"  # ``kafkasim check`` reads it again
    recorder.history.write(saved)
    report = check(recorder.history)
    outcomes = Counter(
        f"{op.type.value} {op.error or ''}".strip() for op in recorder.history.ops if op.f == "send"
    )
    verdict = "\n".join(
        [*report.verdict_lines(), f"send outcomes: {dict(outcomes)}", f"history: {saved}"]
    )
    assert report.ok, verdict
    assert (report.lost, report.duplicated, report.reordered) == (0, 0, 0), verdict
    # With a delivery timeout longer than the election, every record was acknowledged, once.
    assert report.acknowledged == COUNT, verdict
    assert hw == COUNT, verdict
    # The killed leader came back and holds the same records as the others.
    assert caught_up, verdict
    assert killed in {s.broker for s in recorder.history.samples}
    # The kill fell inside the stream: records were acknowledged on both sides of it, and a
    # new leader epoch began (the partition failed over).
    [kill] = recorder.history.faults
    acked_at = [
        op.time_ms for op in recorder.history.ops if op.type is OpType.OK and op.f == "send"
    ]
    assert min(acked_at) < kill.start_ms < max(acked_at)
    assert max(s.leader_epoch for s in recorder.history.samples) >= 1
