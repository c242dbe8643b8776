"""The history checker's transaction rules (KIP-98): what read_committed consumers and consumer
groups saw of each transaction, against what its producer was told.

Pure, like ``faults.checker`` (which calls it): values in, a ``TransactionReport`` out.
``faults.history`` says what a transactional history holds.

Theory of operation. ``TxnIndex`` collects, in the checker's single pass over the ops, every
transaction (``Txn``: its sends, the offsets it sent, how it ended) and, per partition, the
*copies* of each value: a value may be sent by several transactions (a consume-transform-produce
loop sends the same output again after an abort), at most one of which may commit. A read is
*attributed* to the copy acknowledged at the offset it read; failing that, to the only copy
whose offset is unknown, or to the only copy; otherwise it stays unattributed (only the
exactly-once rule uses it).

Outcomes, from the client's side: a transaction is *committed* when its commit returned ok,
*aborted* when its abort returned ok or its commit failed (definitely), *unknown* otherwise
(a commit or abort that timed out, or neither was called: the coordinator aborts it after
``transaction.timeout.ms``, unseen). It is *evidently committed* when committed, or unknown but
shown committed by what others saw (a read_committed read of it after its commit was invoked,
its group offsets read back).

When Kafka exposes a committed transaction. The coordinator answers EndTxn(commit) as soon as
PrepareCommit is in its log, and writes the COMMIT markers afterwards
(``TransactionCoordinator.endTransaction`` replies before ``addTxnMarkersToSend``); a partition's
last stable offset passes the transaction's records once its marker is written there. So a
read_committed consumer may legitimately see a transaction's records after its commit was
invoked and *before* the producer hears ok (or even when it never does), and may miss them for
a while after the ok (the marker is not yet written). It can never see them before the commit
is invoked: nothing may be stable before PrepareCommit exists. Only that is judged in time.

The rules, each on read_committed reads only (read_uncommitted consumers may see everything;
the checker's other rules judge them as before):

1. aborted read (Jepsen's G1a): a read attributed to an aborted transaction, whenever it
   happened — the consumer should have dropped it (the fetch's aborted-transaction list).
2. intermediate read (G1b, an uncommitted read): a read attributed to a transaction that is
   not aborted, made before its commit was invoked (strictly earlier; never invoked counts as
   later than every read) — its records were exposed while it was open: the last stable offset
   ran ahead of its first offset.
3. committed transaction partly visible (atomicity): for an evidently committed transaction T,
   a consumer C and a partition p that T wrote records to at known offsets: if C read p past T's
   highest offset there, and C either read some record of T (anywhere) or read p below T's lowest
   offset there, then C must have read every record of T on p. A consumer process is taken to
   read each partition forward without jumping ahead: the runtime names a new process (e.g.
   ``consumer-1#2``) when a consumer seeks forward or takes a partition over from another.
   A process that resumed p from its group's committed offset (its own ``fetch_offsets`` of p;
   the lowest, if it went back) is held instead to T's records on p from that offset on: a
   consume-transform-produce loop commits each partition's position on its own, so a restarted
   one may resume p past T while it reads T on another partition (txn-leader-crash seed 5:
   ``t1#1`` resumed events-1 at 832, after p1:237's records there, and read its records on
   events-0 from 829).
4. offsets committed without their writes: a group offset was visible (a ``fetch_offsets`` op,
   or the final read-back) that exactly the offsets a transaction sent for that group and
   partition explain, and either every transaction that sent it aborted, or one evidently
   committed transaction sent it and some of its records are missing from the final state
   (the final leader's log below the final HW at the acknowledged offset — anywhere in it when
   the offset is unknown — or, without a captured log, any read_committed read). The
   verdict says DATA LOST: the input behind that offset is never read again.
5. writes committed without their offsets: an evidently committed transaction sent group
   offset ``o`` for a partition, the group's offsets were read back at the end, and the one for
   that partition is absent or below ``o`` (the workload's offsets only move forward): its input
   is processed again.
6. exactly-once duplicate: a read_committed consumer read one transactional value at more than
   one offset of a partition (not counting aborted reads): it was committed twice, by one
   transaction retrying a send that was already written or by two (a zombie not fenced).

Lost writes of a committed transaction are the checker's own "lost" rule: a transactional send
counts as acknowledged when its transaction's commit returned ok (``TxnIndex.acknowledgement``),
never on its own send ok, which only says the record reached the log, uncommitted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from kafkasim.common.types import TopicPartition
from kafkasim.faults.history import ABORT, COMMIT, FETCH_OFFSETS, SEND_OFFSETS, Op, OpType
from kafkasim.faults.verdict import (
    AbortedRead,
    ExactlyOnceDuplicate,
    IntermediateRead,
    OffsetsWithoutWrites,
    PartialTransaction,
    TransactionReport,
    WritesWithoutOffsets,
)

FINAL_READ_BACK = "final read-back"
GroupPartition = tuple[str, str, int]  # (group, topic, partition)


@dataclass(slots=True)
class TxnSend:
    """One transactional send of a value: its first op fixes the producer and send order."""

    txn: Txn
    tp: TopicPartition
    value: str
    order: int  # index of its first op in the history
    first: Op
    ack: Op | None = None  # its send ok: the offset the record was appended at (uncommitted)
    failed: bool = False  # its send failed: definitely not written


@dataclass(slots=True)
class Txn:
    """One transaction, ``"<transactional.id>:<n>"``, as its producer saw it."""

    name: str
    process: str | None = None
    commit_invoked_ms: int | None = None
    committed: Op | None = None  # the ok commit
    aborted: Op | None = None  # the ok abort, or the failed commit
    sends: list[TxnSend] = field(default_factory=list)
    offsets: dict[GroupPartition, int] = field(default_factory=dict)  # send_offsets
    evident: bool = False  # committed, or shown committed by what consumers saw

    @property
    def outcome(self) -> str:
        if self.committed is not None:
            return "committed"
        return "aborted" if self.aborted is not None else "unknown"

    def written(self) -> Iterable[TxnSend]:
        """Its sends that may have been written (not failed)."""
        return (s for s in self.sends if not s.failed)


class TxnIndex:
    """Every transaction of a history and every copy of every transactional value, filled by
    ``add`` in the checker's pass over the ops (in history order)."""

    def __init__(self) -> None:
        self.txns: dict[str, Txn] = {}
        self.copies: dict[TopicPartition, dict[str, list[TxnSend]]] = {}
        self.fetched: list[Op] = []  # ok fetch_offsets ops

    def _txn(self, name: str, process: str) -> Txn:
        txn = self.txns.get(name)
        if txn is None:
            txn = self.txns[name] = Txn(name, process)
        return txn

    def add(self, index: int, op: Op) -> bool:
        """Index ``op``; True when it is a transaction op the checker's partition rules must
        not see (a commit, abort, send_offsets or fetch_offsets)."""
        if op.f in (COMMIT, ABORT):
            assert op.txn is not None  # Op checks it
            self._end(self._txn(op.txn, op.process), op)
            return True
        if op.f == SEND_OFFSETS:
            assert op.group is not None and op.offset is not None  # Op checks it
            if op.txn is not None and op.type is not OpType.FAIL:
                key = (op.group, op.topic, op.partition)
                self._txn(op.txn, op.process).offsets[key] = op.offset
            return True
        if op.f == FETCH_OFFSETS:
            if op.type is OpType.OK:
                self.fetched.append(op)
            return True
        if op.f == "send" and op.txn is not None:
            self._send(index, op)
        return False

    @staticmethod
    def _end(txn: Txn, op: Op) -> None:
        if op.f == COMMIT:
            if op.type is OpType.INVOKE and txn.commit_invoked_ms is None:
                txn.commit_invoked_ms = op.time_ms
            elif op.type is OpType.OK and txn.committed is None:
                txn.committed = op
                txn.evident = True
            elif op.type is OpType.FAIL and txn.aborted is None:
                txn.aborted = op
        elif op.type is OpType.OK and txn.aborted is None:
            txn.aborted = op
        if txn.commit_invoked_ms is None and op.f == COMMIT and op.type is not OpType.INVOKE:
            txn.commit_invoked_ms = op.time_ms  # a completion recorded without its invoke

    def _send(self, index: int, op: Op) -> None:
        assert op.txn is not None
        txn = self._txn(op.txn, op.process)
        tp = TopicPartition(op.topic, op.partition)
        copies = self.copies.setdefault(tp, {}).setdefault(op.value, [])
        copy = next((c for c in copies if c.txn is txn), None)
        if copy is None:
            copy = TxnSend(txn, tp, op.value, index, op)
            copies.append(copy)
            txn.sends.append(copy)
        if op.type is OpType.OK and copy.ack is None:
            copy.ack = op
        elif op.type is OpType.FAIL:
            copy.failed = True

    # -- what the checker's partition rules ask -------------------------------------------------

    def values(self, tp: TopicPartition) -> Mapping[str, list[TxnSend]]:
        """The transactional values sent to ``tp`` and their copies."""
        return self.copies.get(tp, {})

    @staticmethod
    def governing(copies: Sequence[TxnSend]) -> TxnSend | None:
        """The copy whose transaction committed (the first, should several have)."""
        return next((c for c in copies if c.txn.committed is not None and not c.failed), None)

    def acknowledgement(self, copies: Sequence[TxnSend]) -> Op | None:
        """The op acknowledging a transactional value: its committed copy's send ok, or, when
        that send's outcome was never seen, the send's invoke dated at the commit's ok (the
        commit's ok acknowledges every send of the transaction: a failed send fails it)."""
        copy = self.governing(copies)
        if copy is None:
            return None
        if copy.ack is not None:
            return copy.ack
        assert copy.txn.committed is not None
        done = copy.txn.committed.time_ms
        return replace(copy.first, type=OpType.OK, time_ms=done, offset=None, error=None)

    @staticmethod
    def committed_offsets(copies: Sequence[TxnSend]) -> set[int]:
        """The offsets holding a copy whose transaction committed."""
        return {
            c.ack.offset
            for c in copies
            if c.txn.committed is not None and c.ack is not None and c.ack.offset is not None
        }

    @staticmethod
    def attribute(copies: Sequence[TxnSend], offset: int | None) -> TxnSend | None:
        """The copy a read of ``offset`` saw (see the module docstring); None: ambiguous."""
        if offset is not None:
            for c in copies:
                if c.ack is not None and c.ack.offset == offset:
                    return c
        if len(copies) == 1:
            return copies[0]
        unplaced = [c for c in copies if c.ack is None or c.ack.offset is None]
        return unplaced[0] if len(unplaced) == 1 else None


# -- the rules --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Consumer:
    """One read_committed consumer's reads of one partition."""

    low: int | None = None
    high: int | None = None
    values: set[str] = field(default_factory=set)
    offsets: dict[str, dict[int, str]] = field(default_factory=dict)  # value -> offset -> txn

    def moved(self, offset: int | None) -> None:
        """It read ``offset`` (a record no rule below needs more of)."""
        if offset is not None:
            self.low = offset if self.low is None else min(self.low, offset)
            self.high = offset if self.high is None else max(self.high, offset)

    def saw(self, offset: int | None, value: str, txn: str) -> None:
        """It read transactional ``value`` at ``offset``, a record of ``txn`` ("?": unknown)."""
        self.values.add(value)
        self.moved(offset)
        if offset is not None:
            self.offsets.setdefault(value, {}).setdefault(offset, txn)


class _Judge:
    """The rules of the module docstring over one history's transactions."""

    def __init__(
        self,
        index: TxnIndex,
        reads: Mapping[TopicPartition, Sequence[Op]],
        finals: Mapping[TopicPartition, Sequence[tuple[int, str]] | None],
    ) -> None:
        self.index = index
        self.reads = reads
        self.finals = finals
        self.report = TransactionReport()
        self.consumers: dict[TopicPartition, dict[str, _Consumer]] = {}
        self.seen: dict[tuple[str, str], set[tuple[TopicPartition, str]]] = {}  # (C, T)
        self.learned: dict[tuple[str, TopicPartition, str], int] = {}  # (T, tp, v) -> offset
        self._log_at: dict[TopicPartition, dict[int, str]] = {}
        self._log_values: dict[TopicPartition, set[str]] = {}

    def tally(self) -> None:
        r = self.report
        for txn in self.index.txns.values():
            r.transactions += 1
            outcome = txn.outcome
            if outcome == "committed":
                r.committed += 1
            elif outcome == "aborted":
                r.aborted += 1
            else:
                r.unknown += 1

    def rules_1_2_reads(self) -> None:
        """Rules 1 and 2, and what every later rule needs from the read_committed reads."""
        reported: set[tuple[str, TopicPartition, int | None, str]] = set()
        for tp, reads in self.reads.items():
            values = self.index.values(tp)
            for op in reads:
                if not op.read_committed:
                    continue
                consumer = self.consumers.setdefault(tp, {}).setdefault(op.process, _Consumer())
                copies = values.get(op.value)
                if copies is None:  # not transactional: only the consumer's position counts
                    consumer.moved(op.offset)
                    continue
                copy = self.index.attribute(copies, op.offset)
                if copy is None:
                    consumer.saw(op.offset, op.value, "?")
                    continue
                key = (op.process, tp, op.offset, op.value)
                first_time = key not in reported
                reported.add(key)
                self._read(tp, op, copy.txn, consumer, report=first_time)

    def _read(self, tp: TopicPartition, op: Op, txn: Txn, consumer: _Consumer, *,
              report: bool) -> None:  # fmt: skip
        """One read_committed read of a record of ``txn``."""
        where = (txn.name, op.process, tp.topic, tp.partition, op.offset, op.value, op.time_ms)
        if txn.aborted is not None:
            if report:
                outcome = _how_aborted(txn.aborted)
                self.report.aborted_reads.append(AbortedRead(*where, outcome=outcome))
            consumer.moved(op.offset)
            return
        consumer.saw(op.offset, op.value, txn.name)
        self.seen.setdefault((op.process, txn.name), set()).add((tp, op.value))
        if op.offset is not None:
            self.learned.setdefault((txn.name, tp, op.value), op.offset)
        invoked = txn.commit_invoked_ms
        if invoked is None or op.time_ms < invoked:
            if report:
                read = IntermediateRead(*where, commit_invoked_ms=invoked)
                self.report.intermediate_reads.append(read)
        else:
            txn.evident = True

    def rules_4_5_offsets(self, final_group_offsets: Mapping[GroupPartition, int]) -> None:
        """Rules 4 and 5."""
        sent: dict[tuple[GroupPartition, int], list[Txn]] = {}
        for txn in self.index.txns.values():
            for key, offset in txn.offsets.items():
                sent.setdefault((key, offset), []).append(txn)
        observed: list[tuple[GroupPartition, int, str]] = []
        for op in self.index.fetched:
            assert op.group is not None and op.offset is not None
            observed.append(((op.group, op.topic, op.partition), op.offset, op.process))
        observed.extend((key, o, FINAL_READ_BACK) for key, o in final_group_offsets.items())
        # Evidence first (an unknown transaction alone behind a visible offset committed), so
        # that rule 4's verdict does not depend on the order the observations came in.
        for key, offset, _ in observed:
            alive = [t for t in sent.get((key, offset), []) if t.aborted is None]
            if len(alive) == 1:
                alive[0].evident = True
        reported: set[tuple[str, GroupPartition]] = set()
        for key, offset, observer in observed:
            candidates = sent.get((key, offset), [])
            if not candidates:
                continue
            alive = [t for t in candidates if t.aborted is None]
            culprits: list[tuple[Txn, tuple[tuple[str, int, str], ...]]]
            if not alive:
                culprits = [(candidates[0], ())]
            else:
                # The committed ones answer for it; else a lone unknown one; of several
                # unknown ones, which committed is moot.
                chosen = [t for t in alive if t.committed] or (alive if len(alive) == 1 else [])
                culprits = [(t, self.missing(t)) for t in chosen]
            for txn, missing in culprits:
                if (not missing and txn.aborted is None) or (txn.name, key) in reported:
                    continue
                reported.add((txn.name, key))
                group, topic, partition = key
                found = OffsetsWithoutWrites(
                    txn=txn.name,
                    group=group,
                    topic=topic,
                    partition=partition,
                    offset=offset,
                    observer=observer,
                    outcome=txn.outcome,
                    missing=missing,
                )
                self.report.offsets_without_writes.append(found)
        groups_read_back = {group for group, _, _ in final_group_offsets}
        for txn in self.index.txns.values():
            if not txn.evident:
                continue
            for key, offset in txn.offsets.items():
                if key[0] not in groups_read_back:
                    continue
                final = final_group_offsets.get(key)
                if final is None or final < offset:
                    group, topic, partition = key
                    self.report.writes_without_offsets.append(
                        WritesWithoutOffsets(txn.name, group, topic, partition, offset, final)
                    )

    def missing(self, txn: Txn) -> tuple[tuple[str, int, str], ...]:
        """``txn``'s written records absent from the final state (rule 4's test)."""
        return tuple(
            (s.tp.topic, s.tp.partition, s.value)
            for s in txn.written()
            if not self._present(s.tp, s.value, None if s.ack is None else s.ack.offset)
        )

    def _present(self, tp: TopicPartition, value: str, offset: int | None) -> bool:
        log = self.finals.get(tp)
        if log is None:
            return any(value in c.values for c in self.consumers.get(tp, {}).values())
        if tp not in self._log_at:
            self._log_at[tp] = dict(log)
            self._log_values[tp] = {v for _, v in log}
        if offset is not None:
            return self._log_at[tp].get(offset) == value
        return value in self._log_values[tp]

    def rule_3_partial(self) -> None:
        resumed: dict[tuple[str, TopicPartition], int] = {}  # (C, p) -> lowest offset fetched
        for op in self.index.fetched:
            if op.offset is not None and op.offset >= 0:
                key = (op.process, TopicPartition(op.topic, op.partition))
                resumed[key] = min(op.offset, resumed.get(key, op.offset))
        for txn in self.index.txns.values():
            if not txn.evident:
                continue
            records: dict[TopicPartition, list[tuple[int | None, str]]] = {}
            for s in txn.written():
                offset = s.ack.offset if s.ack is not None else None
                if offset is None:
                    offset = self.learned.get((txn.name, s.tp, s.value))
                records.setdefault(s.tp, []).append((offset, s.value))
            for tp, held in records.items():
                known = [o for o, _ in held if o is not None]
                if not known:
                    continue
                first, last = min(known), max(known)
                for process, consumer in sorted(self.consumers.get(tp, {}).items()):
                    if consumer.high is None or consumer.high <= last:
                        continue  # it did not read past the transaction
                    seen = self.seen.get((process, txn.name), set())
                    start = resumed.get((process, tp))
                    if start is not None:
                        if start > last:
                            continue  # it resumed p past the transaction
                        owed = held  # from its start on, when it resumed p inside the transaction
                        if start > first:
                            owed = [(o, v) for o, v in held if o is not None and o >= start]
                        self._judge_partial(txn, tp, owed, process, high=consumer.high, seen=seen)
                    elif seen or (consumer.low is not None and consumer.low < first):
                        self._judge_partial(txn, tp, held, process, high=consumer.high, seen=seen)

    def _judge_partial(self, txn: Txn, tp: TopicPartition,
                       held: Sequence[tuple[int | None, str]], process: str, *, high: int,
                       seen: set[tuple[TopicPartition, str]]) -> None:  # fmt: skip
        missing = tuple((-1 if o is None else o, v) for o, v in held if (tp, v) not in seen)
        if missing:
            found = PartialTransaction(
                txn=txn.name,
                process=process,
                topic=tp.topic,
                partition=tp.partition,
                read_past=high,
                seen=len(held) - len(missing),
                records=len(held),
                missing=missing,
            )
            self.report.partial.append(found)

    def rule_6_duplicates(self) -> None:
        for tp, consumers in self.consumers.items():
            values = self.index.values(tp)
            for process, consumer in sorted(consumers.items()):
                for value, offsets in consumer.offsets.items():
                    if len(offsets) > 1 and value in values:
                        ordered = sorted(offsets)
                        found = ExactlyOnceDuplicate(
                            process=process,
                            topic=tp.topic,
                            partition=tp.partition,
                            value=value,
                            offsets=tuple(ordered),
                            txns=tuple(offsets[o] for o in ordered),
                        )
                        self.report.duplicates.append(found)


def judge(
    index: TxnIndex,
    reads: Mapping[TopicPartition, Sequence[Op]],
    finals: Mapping[TopicPartition, Sequence[tuple[int, str]] | None],
    final_group_offsets: Mapping[GroupPartition, int],
) -> TransactionReport:
    """The transactions' report. ``reads``: every partition's ok reads in history order;
    ``finals``: every partition's final leader log below the final HW (None: none captured);
    ``final_group_offsets``: ``History.final_group_offsets``."""
    j = _Judge(index, reads, finals)
    j.tally()
    j.rules_1_2_reads()
    j.rules_4_5_offsets(final_group_offsets)  # before rule 3: it may show a commit evident
    j.rule_3_partial()
    j.rule_6_duplicates()
    return j.report


def _how_aborted(op: Op) -> str:
    if op.f == ABORT:
        return f"abort ok at {op.time_ms} ms"
    return f"commit failed at {op.time_ms} ms" + (f": {op.error}" if op.error else "")
