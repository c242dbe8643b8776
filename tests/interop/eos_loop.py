"""A confluent-kafka consume-transform-produce loop with exactly-once semantics, recording a
history (``faults.history``) the checker judges (``faults.transactions``).

The loop: a consumer in a group (``isolation.level=read_committed``, no auto commit) subscribed
to the input topic, and a transactional producer. Per poll batch: ``begin_transaction``, one
output record per input record (value ``out-<input value>``, to the input's partition number, so
that every copy of an output value lands in one partition), ``send_offsets_to_transaction`` with
the consumer's positions on the batch's partitions and its group metadata, then
``commit_transaction``. Errors as confluent-kafka documents them: a retriable one repeats the
call; one that requires an abort aborts the transaction and rewinds the consumer to the group's
committed offsets; a fatal one (fenced) closes the producer, starts a new one with the same
``transactional.id`` (its ``init_transactions`` aborts whatever the old one left open) and
rewinds too. The loop ends once the group's committed offsets reach the input's end offsets.

What the history holds: every output send (``invoke``; ``ok`` with its offset from the delivery
report, ``info`` when the report is an error: librdkafka does not say whether it was written),
``send_offsets`` per partition, each ``commit`` (``invoke``, then ``ok``, or ``info`` when it
failed and the transaction was aborted instead) and each ``abort``. Transactions are named
``<transactional.id>:<n>``, ``n`` counting on across producer instances of one id.

Run as ``python -m tests.interop.eos_loop BOOTSTRAP TXN_ID GROUP OUTPUT HISTORY STALL_AT BEGAN``
it is the producer a test SIGKILLs: it writes each op to HISTORY as a JSON line as it happens (times
since ``time.monotonic()`` was BEGAN, the test's own origin: one clock for the machine), and in
transaction ``STALL_AT`` (after its records were delivered and its offsets sent, before the
commit) prints ``stalled`` and sleeps until killed.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)
from confluent_kafka import TopicPartition as CkPartition

from kafkasim.faults.history import READ_COMMITTED, Op, OpType

INPUT = "eos-input"
PARTITIONS = 3
BATCH = 100  # records per consume call, so per transaction at most
CALL_TIMEOUT_S = 30.0  # one transactional call (librdkafka retries inside it)
STALLED = "stalled"

T = TypeVar("T")


class OpLog:
    """Where the loop's ops go: a list (the test's history), and a JSON-lines file when the loop
    runs in a process that may be killed (each line flushed as it is written)."""

    def __init__(self, path: Path | None = None, began: float | None = None) -> None:
        self.ops: list[Op] = []
        self.began = time.monotonic() if began is None else began
        self._file = None if path is None else path.open("a", buffering=1)

    def now_ms(self) -> int:
        return int((time.monotonic() - self.began) * 1000)

    def add(self, op: Op) -> None:
        self.ops.append(op)
        if self._file is not None:
            self._file.write(json.dumps({"kind": "op", **op.record()}, sort_keys=True) + "\n")


class EosLoop:
    """One instance of the loop (a consumer and a transactional producer); ``run`` drives it."""

    def __init__(
        self,
        bootstrap: str,
        transactional_id: str,
        group: str,
        output: str,
        log: OpLog,
        *,
        first_txn: int = 0,
        process: str = "eos-1",
        before_commit: Callable[[int], None] | None = None,
    ) -> None:
        self.bootstrap, self.transactional_id, self.group = bootstrap, transactional_id, group
        self.output, self.before_commit = output, before_commit
        self.log, self.process, self.next_txn = log, process, first_txn
        self.commit_ms: list[float] = []  # commit_transaction's duration, per commit ok
        self.offsets_ms: list[float] = []  # send_offsets_to_transaction's, per call ok
        self.aborted = 0
        self.first_begin = self.last_commit = 0.0  # time.monotonic() of both
        self.producers = 0
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "fetch.queue.backoff.ms": 10,
            }
        )
        self.consumer.subscribe([INPUT])
        self.producer = self._new_producer()

    def _new_producer(self) -> Producer:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": self.transactional_id,
                "linger.ms": 5,
                "transaction.timeout.ms": 60_000,
            }
        )
        self._retrying(lambda: producer.init_transactions(CALL_TIMEOUT_S))
        self.producers += 1
        return producer

    def close(self) -> None:
        self.producer.flush(CALL_TIMEOUT_S)
        self.consumer.close()

    # -- the loop ------------------------------------------------------------------------------

    def run(self, deadline_s: float, stall_at: int | None = None) -> None:
        """Transform every input record, one transaction per batch, until the group's committed
        offsets reach ``end_offsets`` of the input (or, with ``stall_at``, until that
        transaction is open with its records delivered: then it returns without committing)."""
        deadline = time.monotonic() + deadline_s
        ends = self.end_offsets()
        while True:
            assert time.monotonic() < deadline, (
                f"{self.process}: not done in {deadline_s} s: committed {self.committed()} of "
                f"{ends}; last ops {self.log.ops[-4:]}"
            )
            batch = [m for m in self.consumer.consume(BATCH, 0.5) if m.error() is None]
            if batch:
                if self.transact(batch, stall=self.next_txn == stall_at):
                    return
            elif self.committed() == ends:
                return

    def transact(self, batch: list[Message], *, stall: bool = False) -> bool:
        """One transaction of ``batch``; True when it stalled (left open on purpose)."""
        txn = f"{self.transactional_id}:{self.next_txn}"
        self.next_txn += 1
        commit_invoked = False
        try:
            self.producer.begin_transaction()
            self.first_begin = self.first_begin or time.monotonic()
            for message in batch:
                self.send(txn, message)
            positions = self.consumer.position(
                [CkPartition(INPUT, p) for p in sorted({partition_of(m) for m in batch})]
            )
            metadata = self.consumer.consumer_group_metadata()
            began = time.monotonic()
            self._retrying(
                lambda: self.producer.send_offsets_to_transaction(
                    positions, metadata, CALL_TIMEOUT_S
                )
            )
            self.offsets_ms.append(1000 * (time.monotonic() - began))
            for tp in positions:
                self._add(OpType.OK, "send_offsets", txn, (INPUT, tp.partition), offset=tp.offset)
            if stall:
                self.producer.flush(CALL_TIMEOUT_S)
                return True
            if self.before_commit is not None:
                self.before_commit(self.next_txn - 1)
            self._add(OpType.INVOKE, "commit", txn)
            commit_invoked = True
            began = time.monotonic()
            self._retrying(lambda: self.producer.commit_transaction(CALL_TIMEOUT_S))
            self.last_commit = time.monotonic()
            self.commit_ms.append(1000 * (self.last_commit - began))
            self.producer.poll(0)  # the last delivery reports, if any are left
            self._add(OpType.OK, "commit", txn)
        except KafkaException as e:
            self.recover(txn, e.args[0], commit_invoked)
        return False

    def send(self, txn: str, message: Message) -> None:
        value = f"out-{(message.value() or b'').decode()}"
        partition = partition_of(message)
        self._add(OpType.INVOKE, "send", txn, (self.output, partition), value)

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                self._add(
                    OpType.OK, "send", txn, (self.output, partition), value, offset=msg.offset()
                )
            else:
                self._add(OpType.INFO, "send", txn, (self.output, partition), value, error=str(err))

        self.producer.produce(
            self.output, value.encode(), partition=partition, on_delivery=delivered
        )

    def recover(self, txn: str, error: KafkaError, commit_invoked: bool) -> None:
        """After a failed transactional call: abort (or replace the producer) and rewind."""
        if commit_invoked:
            self._add(OpType.INFO, "commit", txn, error=str(error))
        if error.txn_requires_abort():
            try:
                self._retrying(lambda: self.producer.abort_transaction(CALL_TIMEOUT_S))
                self._add(OpType.OK, "abort", txn)
            except KafkaException as e:
                if not e.args[0].fatal():
                    raise
                self.producer = self._new_producer()
        elif error.fatal():
            self.producer = self._new_producer()
        else:
            raise KafkaException(error)
        self.aborted += 1
        self.rewind()

    def rewind(self) -> None:
        """Every assigned partition back to the group's committed offset (the beginning when
        it has none)."""
        committed = self.consumer.committed(self.consumer.assignment(), CALL_TIMEOUT_S)
        for tp in committed:
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            self.consumer.seek(CkPartition(tp.topic, tp.partition, offset))

    # -- offsets -------------------------------------------------------------------------------

    def end_offsets(self) -> dict[int, int]:
        return {
            p: self.consumer.get_watermark_offsets(CkPartition(INPUT, p), CALL_TIMEOUT_S)[1]
            for p in range(PARTITIONS)
        }

    def committed(self) -> dict[int, int]:
        wanted = [CkPartition(INPUT, p) for p in range(PARTITIONS)]
        return {tp.partition: tp.offset for tp in self.consumer.committed(wanted, CALL_TIMEOUT_S)}

    # -- helpers -------------------------------------------------------------------------------

    def _retrying(self, call: Callable[[], T]) -> T:
        """``call`` again while it fails with a retriable error (confluent-kafka's advice for
        init_transactions, send_offsets_to_transaction, commit and abort)."""
        deadline = time.monotonic() + 4 * CALL_TIMEOUT_S
        while True:
            try:
                return call()
            except KafkaException as e:
                if not e.args[0].retriable() or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def _add(self, type_: OpType, f: str, txn: str, where: tuple[str, int] = ("", -1),
             value: str = "", *, offset: int | None = None,
             error: str | None = None) -> None:  # fmt: skip
        topic, partition = where
        group = self.group if f == "send_offsets" else None
        now = self.log.now_ms()
        if f in ("commit", "abort"):
            self.log.add(Op.end(type_, f, self.process, time_ms=now, txn=txn, error=error))
            return
        op = Op(type_, f, self.process, now, topic, partition, value, offset=offset, error=error,
                idempotent=True, txn=txn, group=group)  # fmt: skip
        self.log.add(op)


def partition_of(message: Message) -> int:
    partition = message.partition()
    assert partition is not None, message  # a record's message always names its partition
    return partition


def read_op(process: str, time_ms: int, message: Message) -> Op:
    """A read_committed read of ``message`` as a history op."""
    value = (message.value() or b"").decode()
    return Op(OpType.OK, "read", process, time_ms, message.topic() or "", message.partition() or 0,
              value, offset=message.offset(), isolation=READ_COMMITTED)  # fmt: skip


def main(argv: list[str]) -> None:
    bootstrap, transactional_id, group, output, history, stall_at, began = argv
    log = OpLog(Path(history), float(began))
    loop = EosLoop(bootstrap, transactional_id, group, output, log, process="zombie")
    loop.run(120.0, stall_at=int(stall_at))
    print(STALLED, flush=True)
    while True:  # open transaction, until SIGKILL
        time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1:])
