"""The history checker: what a failure-injection run did to the data, judged from its history.

Pure: ``check(history) -> CheckReport``, values in, values out; no IO, no clock. The same
checker judges simulated and real runs (``faults.history`` explains what a history holds).

Theory of operation. One pass over the operations indexes them per partition (sends by value,
ok reads); one stable sort orders the replica samples by time. Every check below is then a
linear scan: a history of 10^6 operations checks in seconds. Per partition (topic, partition):

1. The *final leader* is the broker named leader by the partition's last sample, if its log was
   captured; otherwise the captured replica log holding the most offsets below the HW (ties:
   the lowest broker id). The *final HW* is ``history.final_hw``, else the HW of the last
   leader sample, else unknown (then the whole final leader log counts).
2. The *final state* is the final leader's log below the final HW plus every record an ``ok``
   read returned (once read, a record existed, as in Jepsen's queue checkers).
3. lost: an acknowledged send (``ok``, acks "1" or "all") whose value is absent from the final
   leader's log below the final HW — what any consumer reading the partition from now on
   gets. A record a consumer read earlier but that is gone from the log is lost too (acks=1
   and unclean election do that). Only when no replica log was captured does the final state
   of rule 2 stand in for the log. Sends whose outcome is ``info`` (unknown) or ``fail``, and
   acks=0 sends (nothing was acknowledged), are never lost.
4. unexpected: a value in the final state that no send to this partition carried.
5. duplicated: a value at more than one offset of the final state. Invariant 7 when the
   producer was idempotent; without idempotence Kafka's retries may duplicate, so it is
   reported but allowed.
6. reordered: two acknowledged values of one producer whose final offsets contradict the order
   in which they were sent (invoked). Idempotence guarantees the order per partition, so for an
   idempotent producer it is an anomaly; without it Kafka reorders on retry when
   max.in.flight > 1, so it is reported but allowed.
7. read beyond HW: a read of an offset at or above the HW of the fetch that returned it
   (invariant 3).
8. divergent read: a read of offset ``o`` below the final HW whose value is not what the final
   leader's log holds at ``o``: a record a consumer saw was overwritten (what acks=1 and
   unclean election do). It loses data a consumer had seen, so the verdict says DATA LOST.

The invariants of ARCHITECTURE.md checked from samples and final logs (each a ``Violation``):

* 1 — each replica's final log: offsets strictly increasing, unique, dense from its first.
* 2 — a leader's HW never decreases within one leader epoch; a follower's HW is at most the
  leader's for the same leader epoch, compared with the leader's next sample of that epoch (at
  the same time or later). A follower still on an older epoch follows another leader and may
  legitimately be ahead of a new one, so epochs are never mixed. Nor is a follower judged in an
  epoch before it has fetched in it (its sample's ``fetched_leader_epoch`` below the epoch): it
  still carries the HW the previous epoch gave it, which Kafka's makeFollower keeps, while the
  new leader's HW may trail it until every ISR member has fetched (makeLeader resets what it
  knows of the followers' log ends). A deposed leader shows exactly that: it announced HW h,
  the new leader, a follower until then, had learnt less. Its first fetch in the new
  epoch sets its HW to min(its log end, the leader's HW), lowering it if need be
  (ReplicaFetcherThread.processPartitionData); from then on it is judged. Samples that do not
  say (histories written before they carried it) are judged as before.
  "Within one leader epoch" means within one registration of its leader too (the sample's
  ``broker_epoch``, KIP-380): a leader that restarts while no controller watches it die (every
  broker down at once, back after their sessions expired) is handed its partitions again at
  the same leader epoch by the next controller's failover, which resends the leadership in
  ZooKeeper unchanged; the restarted broker starts from its checkpointed HW (0 if it never
  wrote one) and only moves it forward, so it announces less than before. Followers are not
  judged in an epoch once its leader has restarted in it: their HW may come from the
  leader's earlier registration, as a follower's from an earlier epoch's leader.
* 3 — read beyond HW (rule 7).
* 4 — in every leader's sample: it names itself leader, leader ∈ ISR ⊆ replicas; no two
  brokers lead one leader epoch; no broker's view of the leader epoch ever decreases. (A
  deposed leader cut off from ZooKeeper still reports its old epoch after a new leader took a
  higher one: that is Kafka's zombie leader, fenced by the epoch, not a violation.)
* 5 — every member of the final ISR holds the final leader's records at every offset below the
  final HW (from its own log start on).
* 7 — duplicates from an idempotent producer (rule 5).

A condition that persists across samples (a leader outside its ISR for a minute) is reported
once, at its first sample.

Transactions (``faults.transactions`` holds their own rules; these are the changes to the rules
above). A value sent in a transaction counts as acknowledged only when its transaction's commit
returned ok (rule 3; aborted or unknown transactions lose nothing), and it is lost when the
final log does not hold it at the offset its send was acknowledged at. The aborted copies a log
keeps, and what read_uncommitted consumers read of transactional values, are no part of the
final state (rules 2, 5, 6): only the committed copies' offsets and read_committed reads are. A
transactional value's send order is its committed copy's. Transaction markers in the final logs
(``History.final_markers``) fill their offsets for invariant 1.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafkasim.common.types import TopicPartition
from kafkasim.faults.history import History, Op, OpType, ReplicaSample
from kafkasim.faults.transactions import TxnIndex, TxnSend, judge
from kafkasim.faults.verdict import (
    CheckReport,
    DivergentRead,
    DuplicateRecord,
    LostRecord,
    PartitionReport,
    ReadBeyondHw,
    Reordering,
    UnexpectedRecord,
    Violation,
)

__all__ = ["CheckReport", "PartitionReport", "Violation", "check"]

Report = Callable[[int, str], None]  # records a violation: (invariant, detail)


# -- the check ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Send:
    """What the history says about one sent value: its first op (the invoke, normally) fixes
    the producer and the send order; ``ack`` is its first ok."""

    process: str
    idempotent: bool
    order: int  # the index of its first op in the history
    ack: Op | None = None
    transactional: bool = False


@dataclass(slots=True)
class _Ops:
    """One partition's operations, indexed in the single pass over ``history.ops``."""

    sends: dict[str, _Send] = field(default_factory=dict)  # insertion order = send order
    reads: list[Op] = field(default_factory=list)  # ok reads, in history order


def check(history: History) -> CheckReport:
    """Judge ``history``; see the module docstring for every rule."""
    ops: dict[TopicPartition, _Ops] = {}
    txns = TxnIndex()
    for index, op in enumerate(history.ops):
        if txns.add(index, op):
            continue
        tp = TopicPartition(op.topic, op.partition)
        indexed = ops.get(tp)
        if indexed is None:
            indexed = ops[tp] = _Ops()
        if op.f == "send":
            send = indexed.sends.get(op.value)
            if send is None:
                send = indexed.sends[op.value] = _Send(op.process, op.idempotent, index)
            send.idempotent = send.idempotent or op.idempotent
            if op.txn is not None:
                send.transactional = True
            elif op.type is OpType.OK and send.ack is None:
                send.ack = op
        elif op.f == "read" and op.type is OpType.OK:
            indexed.reads.append(op)
    for tp, indexed in ops.items():
        if txns.values(tp):
            _bind_transactional(indexed, txns.values(tp), txns)

    samples: dict[TopicPartition, list[ReplicaSample]] = {}
    # Stable: samples taken at the same time keep the order the run recorded them in.
    for sample in sorted(history.samples, key=lambda s: s.time_ms):
        samples.setdefault(TopicPartition(sample.topic, sample.partition), []).append(sample)

    logs: dict[TopicPartition, dict[int, list[tuple[int, str]]]] = {}
    for (topic, partition, broker), entries in history.final_logs.items():
        logs.setdefault(TopicPartition(topic, partition), {})[broker] = entries

    keys = set(ops) | set(samples) | set(logs)
    keys |= {TopicPartition(t, p) for t, p in history.final_hw}
    markers: dict[TopicPartition, dict[int, list[tuple[int, str]]]] = {}
    for (topic, partition, broker), entries in history.final_markers.items():
        markers.setdefault(TopicPartition(topic, partition), {})[broker] = entries

    report = CheckReport()
    finals: dict[TopicPartition, list[tuple[int, str]] | None] = {}
    for tp in sorted(keys):
        partition_report, finals[tp] = _check_partition(
            tp,
            ops.get(tp, _Ops()),
            samples.get(tp, []),
            logs.get(tp, {}),
            history.final_hw.get(tp),
            txns=txns,
            markers=markers.get(tp, {}),
        )
        report.partitions[tp] = partition_report
        report.invariant_violations.extend(partition_report.violations)
    if txns.txns:
        reads = {tp: indexed.reads for tp, indexed in ops.items()}
        report.transactions = judge(txns, reads, finals, history.final_group_offsets)
    return report


def _bind_transactional(indexed: _Ops, copies: Mapping[str, list[TxnSend]], txns: TxnIndex) -> None:
    """A transactional value's acknowledgement, producer and send order are those of its
    committed copy (the first copy's while none committed); the sends are put back in order."""
    for value, send in indexed.sends.items():
        found = copies.get(value)
        if found is None:
            continue
        send.ack = txns.acknowledgement(found)
        governing = txns.governing(found) or found[0]
        send.process, send.order = governing.first.process, governing.order
    indexed.sends = dict(sorted(indexed.sends.items(), key=lambda item: item[1].order))


class _Partition:
    """One partition under judgement: its indexed operations, the report being filled, and
    the final state of rule 2 (a value's first offset in ``first``; only values seen at a
    second offset pay for a set in ``more``, so a clean history of 10^6 values stays small)."""

    def __init__(
        self,
        tp: TopicPartition,
        ops: _Ops,
        report: PartitionReport,
        txn_values: Mapping[str, list[TxnSend]],
    ) -> None:
        self.tp = tp
        self.ops = ops
        self.report = report
        self.txn_values = txn_values  # the transactional values sent here, and their copies
        self.first: dict[str, int] = {}
        self.more: dict[str, set[int]] = {}
        self.seen_without_offset: set[str] = set()  # read by an op that recorded no offset

    def violation(self, invariant: int, detail: str) -> None:
        self.report.violations.append(
            Violation(invariant, self.tp.topic, self.tp.partition, detail)
        )

    def place(self, value: str, offset: int, source: str) -> None:
        known = self.first.get(value)
        if known is None:
            self.first[value] = offset
            if value not in self.ops.sends:
                self.report.unexpected.append(UnexpectedRecord(value, offset, source))  # rule 4
        elif known != offset:
            self.more.setdefault(value, {known}).add(offset)


def _check_partition(
    tp: TopicPartition,
    ops: _Ops,
    samples: list[ReplicaSample],
    logs: dict[int, list[tuple[int, str]]],
    final_hw: int | None,
    *,
    txns: TxnIndex,
    markers: dict[int, list[tuple[int, str]]],
) -> tuple[PartitionReport, list[tuple[int, str]] | None]:
    """The partition's report, and its final leader's log below the final HW (None: no log
    was captured)."""
    leader_samples = [s for s in samples if s.is_leader]
    if final_hw is None and leader_samples:
        final_hw = leader_samples[-1].high_watermark
    leader, committed = _rule_final_leader(samples, logs, final_hw)
    p = _Partition(
        tp, ops, PartitionReport(tp.topic, tp.partition, leader, final_hw), txns.values(tp)
    )
    _rule_final_state(p, committed)
    _rule_reads_below_hw(p)
    _rule_divergent_reads(p, committed)
    _rule_lost_and_reordered(p, committed if leader is not None else None)
    _rule_duplicates(p)
    for broker, entries in sorted(logs.items()):
        held = markers.get(broker, [])
        merged = heapq.merge(entries, held, key=lambda entry: entry[0]) if held else entries
        _check_log_offsets(broker, merged, p.violation)
    _check_samples(samples, p.violation)
    if final_hw is not None and leader is not None and leader_samples:
        _check_isr_prefix(
            leader, leader_samples, logs, committed, hw=final_hw, violation=p.violation
        )
    return p.report, committed if leader is not None else None


def _rule_final_leader(
    samples: Sequence[ReplicaSample], logs: dict[int, list[tuple[int, str]]], hw: int | None
) -> tuple[int | None, list[tuple[int, str]]]:
    """Rule 1: the final leader, and its log below the final HW."""
    leader = _final_leader(samples, logs, hw)
    committed = [] if leader is None else [(o, v) for o, v in logs[leader] if hw is None or o < hw]
    return leader, committed


def _rule_final_state(p: _Partition, committed: list[tuple[int, str]]) -> None:
    """Rules 2 and 4: the final state (the committed log, then every ok read, in order), and
    every value in it that no send carried. Of a transactional value, only the copies at
    offsets its committed transactions were acknowledged at, and read_committed reads."""
    committed_at = {
        value: TxnIndex.committed_offsets(copies) for value, copies in p.txn_values.items()
    }
    for offset, value in committed:
        if value in committed_at and offset not in committed_at[value]:
            continue
        p.place(value, offset, "log")
    read_values: set[str] = set()
    for op in p.ops.reads:
        read_values.add(op.value)
        if op.value in committed_at and not op.read_committed:
            continue
        if op.offset is None:
            p.seen_without_offset.add(op.value)
            if op.value not in p.first and op.value not in p.ops.sends:
                p.report.unexpected.append(UnexpectedRecord(op.value, -1, op.process))
            continue
        p.place(op.value, op.offset, op.process)
    p.report.read = len(read_values)


def _rule_reads_below_hw(p: _Partition) -> None:
    """Rule 7 (invariant 3): a read at or above the HW of the fetch that returned it."""
    for op in p.ops.reads:
        if op.offset is not None and op.hw is not None and op.offset >= op.hw:
            p.report.read_beyond_hw.append(
                ReadBeyondHw(op.value, op.process, op.offset, op.hw, op.time_ms)
            )
            p.violation(
                3,
                f"{op.process} read offset {op.offset} ({op.value!r}) at {op.time_ms} ms "
                f"from a fetch whose HW was {op.hw}",
            )


def _rule_divergent_reads(p: _Partition, committed: list[tuple[int, str]]) -> None:
    """Rule 8: a read below the final HW whose value the final leader's log does not hold
    there (each offset and value once)."""
    log_at = dict(committed)
    divergent: set[tuple[int, str]] = set()
    for op in p.ops.reads:
        if op.offset is None:
            continue
        log_value = log_at.get(op.offset)
        if (
            log_value is not None
            and log_value != op.value
            and (op.offset, op.value) not in divergent
        ):
            divergent.add((op.offset, op.value))
            p.report.divergent_reads.append(
                DivergentRead(op.process, op.offset, op.value, log_value, op.time_ms)
            )


def _rule_lost_and_reordered(p: _Partition, committed: list[tuple[int, str]] | None) -> None:
    """Rules 3 and 6: acknowledged values absent from the final log (from the final state
    when no log was captured), and acknowledged values of one producer out of send order."""
    in_log = {v for _, v in committed} if committed is not None else None
    # A transactional value is lost when its acknowledged offset does not hold it: the log
    # may keep an aborted copy elsewhere.
    log_at = dict(committed) if committed is not None and p.txn_values else {}
    running_max: dict[str, tuple[int, str]] = {}  # process -> (highest offset so far, value)
    for value, send in p.ops.sends.items():
        ack = send.ack
        if ack is None or ack.acks == "0":
            continue
        p.report.acknowledged += 1
        position = p.first.get(value)
        if in_log is None:
            gone = position is None and value not in p.seen_without_offset
        elif send.transactional and ack.offset is not None:
            gone = log_at.get(ack.offset) != value
        else:
            gone = value not in in_log
        if gone:
            p.report.lost.append(LostRecord(value, ack.process, ack.offset, ack.time_ms))
        if position is None:
            continue
        if value in p.more:
            position = min(p.more[value])
        highest = running_max.get(send.process)
        if highest is None or position > highest[0]:
            running_max[send.process] = (position, value)
        elif position < highest[0]:
            p.report.reordered.append(
                Reordering(send.process, highest[1], highest[0], value, position, send.idempotent)
            )


def _rule_duplicates(p: _Partition) -> None:
    """Rule 5: a value at more than one offset (invariant 7 for an idempotent producer)."""
    for value, offsets in p.more.items():
        sent = p.ops.sends.get(value)
        idempotent = sent is not None and sent.idempotent
        duplicate = DuplicateRecord(
            value, tuple(sorted(offsets)), None if sent is None else sent.process, idempotent
        )
        p.report.duplicates.append(duplicate)
        if idempotent:
            p.violation(
                7,
                f"idempotent producer {duplicate.process} wrote {value!r} at offsets "
                f"{list(duplicate.offsets)}",
            )


def _final_leader(
    samples: Sequence[ReplicaSample], logs: dict[int, list[tuple[int, str]]], hw: int | None
) -> int | None:
    if samples and samples[-1].leader in logs:
        return samples[-1].leader
    if not logs:
        return None

    def held(broker: int) -> tuple[int, int]:
        below = sum(1 for o, _ in logs[broker] if hw is None or o < hw)
        return below, -broker

    return max(logs, key=held)


def _check_log_offsets(broker: int, entries: Iterable[tuple[int, str]], violation: Report) -> None:
    """Invariant 1 on one replica's final log."""
    previous: int | None = None
    for offset, _ in entries:
        if previous is not None:
            if offset <= previous:
                violation(
                    1,
                    f"broker {broker}'s log holds offset {offset} after offset {previous} "
                    "(offsets must strictly increase)",
                )
            elif offset > previous + 1:
                violation(
                    1,
                    f"broker {broker}'s log has a gap: offsets {previous + 1}..{offset - 1} "
                    f"missing between {previous} and {offset}",
                )
        previous = offset if previous is None else max(previous, offset)


def _check_samples(samples: Sequence[ReplicaSample], violation: Report) -> None:
    """Invariants 2 and 4 over the partition's samples, in time order."""
    reported: set[tuple[Any, ...]] = set()

    def once(key: tuple[Any, ...], invariant: int, detail: str) -> None:
        if key not in reported:
            reported.add(key)
            violation(invariant, detail)

    epoch_seen: dict[int, tuple[int, int]] = {}  # broker -> (highest epoch, when)
    epoch_leader: dict[int, int] = {}  # leader epoch -> the broker that led it
    # (broker, its broker epoch, leader epoch) -> (max HW, when)
    leader_hw: dict[tuple[int, int | None, int], tuple[int, int]] = {}
    # leader epoch -> the times, HWs and broker epochs of its leader's samples, in time order
    leader_times: dict[int, list[int]] = {}
    leader_hws: dict[int, list[int]] = {}
    leader_registrations: dict[int, list[int | None]] = {}
    for s in samples:
        seen = epoch_seen.get(s.broker)
        if seen is not None and s.leader_epoch < seen[0]:
            once(
                ("epoch", s.broker, seen[0], s.leader_epoch),
                4,
                f"broker {s.broker}'s leader epoch went back from {seen[0]} "
                f"({seen[1]} ms) to {s.leader_epoch} ({s.time_ms} ms)",
            )
        if seen is None or s.leader_epoch > seen[0]:
            epoch_seen[s.broker] = (s.leader_epoch, s.time_ms)
        if not s.is_leader:
            continue
        where = f"leader {s.broker}, epoch {s.leader_epoch}, first at {s.time_ms} ms"
        if s.leader != s.broker:
            once(("self", s.broker, s.leader_epoch), 4, f"names {s.leader} leader ({where})")
        if s.leader not in s.isr:
            once(("isr", s.broker, s.leader_epoch), 4, f"leader not in ISR {s.isr} ({where})")
        if not set(s.isr) <= set(s.replicas):
            once(
                ("replicas", s.broker, s.leader_epoch),
                4,
                f"ISR {s.isr} not within replicas {s.replicas} ({where})",
            )
        other = epoch_leader.setdefault(s.leader_epoch, s.broker)
        if other != s.broker:
            once(
                ("two", s.leader_epoch, s.broker),
                4,
                f"brokers {other} and {s.broker} both led leader epoch {s.leader_epoch} "
                f"(broker {s.broker} first at {s.time_ms} ms)",
            )
        incarnation = (s.broker, s.broker_epoch, s.leader_epoch)
        best = leader_hw.get(incarnation)
        if best is not None and s.high_watermark < best[0]:
            once(
                ("hw", s.broker, s.leader_epoch, best[0]),
                2,
                f"leader {s.broker}'s HW went back from {best[0]} ({best[1]} ms) to "
                f"{s.high_watermark} ({s.time_ms} ms) within leader epoch {s.leader_epoch}",
            )
        if best is None or s.high_watermark > best[0]:
            leader_hw[incarnation] = (s.high_watermark, s.time_ms)
        leader_times.setdefault(s.leader_epoch, []).append(s.time_ms)
        leader_hws.setdefault(s.leader_epoch, []).append(s.high_watermark)
        leader_registrations.setdefault(s.leader_epoch, []).append(s.broker_epoch)

    # A follower's HW against its leader's: brokers are rarely sampled at one instant, so each
    # follower sample meets the leader's next sample of the same epoch. The leader's HW only
    # grows within an epoch, so a follower above that is above the leader's HW at its own
    # sample time too. "Next" is a later millisecond: the sampler asks one broker after the
    # other, and within one millisecond the leader may have been asked first, before the HW
    # the follower then reported (leader-crash seed 12 with hw_ignores_followers, where the
    # leader's HW moves at its append: one hop from follower to HW within a millisecond).
    for s in samples:
        times = leader_times.get(s.leader_epoch)
        if s.is_leader or times is None or _not_fetched_yet(s):
            continue
        index = bisect.bisect_right(times, s.time_ms)
        registrations = leader_registrations[s.leader_epoch]
        if index == len(times) or registrations[index] != registrations[0]:
            continue  # no later leader sample, or the leader restarted within the epoch
        leader_hw_then = leader_hws[s.leader_epoch][index]
        if s.high_watermark > leader_hw_then:
            once(
                ("follower", s.broker, s.leader_epoch),
                2,
                f"follower {s.broker}'s HW {s.high_watermark} at {s.time_ms} ms is above its "
                f"leader's {leader_hw_then} at {times[index]} ms (leader epoch {s.leader_epoch})",
            )


def _not_fetched_yet(s: ReplicaSample) -> bool:
    """A follower that has taken no HW from a leader of its current epoch (invariant 2)."""
    return s.fetched_leader_epoch is not None and s.fetched_leader_epoch < s.leader_epoch


def _check_isr_prefix(
    leader: int,
    leader_samples: Sequence[ReplicaSample],
    logs: dict[int, list[tuple[int, str]]],
    committed: Sequence[tuple[int, str]],
    *,
    hw: int,
    violation: Report,
) -> None:
    """Invariant 5: the final ISR's logs agree with the final leader's below the final HW."""
    own = [s for s in leader_samples if s.broker == leader]
    final = own[-1] if own else leader_samples[-1]
    for member in final.isr:
        if member == leader or member not in logs:
            continue
        entries = logs[member]
        log_start = entries[0][0] if entries else None
        theirs = dict(entries)
        differing = 0
        first_difference = ""
        for offset, value in committed:
            if log_start is not None and offset < log_start:
                continue
            held = theirs.get(offset)
            if held == value:
                continue
            differing += 1
            if differing == 1:
                holds = "nothing" if held is None else repr(held)
                first_difference = f"offset {offset}: it holds {holds}, the leader {value!r}"
        if differing:
            violation(
                5,
                f"broker {member} (in the final ISR {final.isr}) disagrees with leader {leader} "
                f"below HW {hw} at {differing} offset(s); first at {first_difference}",
            )
