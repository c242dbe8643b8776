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
  legitimately be ahead of a new one, so epochs are never mixed.
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
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kafkasim.common.types import TopicPartition
from kafkasim.faults.history import History, Op, OpType, ReplicaSample

EXAMPLES_MAX = 10  # evidence items printed per kind and partition by verdict_lines()

Report = Callable[[int, str], None]  # records a violation: (invariant, detail)


# -- evidence -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LostRecord:
    """An acknowledged value absent from the final state."""

    value: str
    process: str
    offset: int | None  # the offset the acknowledgement named
    time_ms: int  # when it was acknowledged


@dataclass(frozen=True, slots=True)
class UnexpectedRecord:
    """A value in the final state that was never sent to this partition."""

    value: str
    offset: int  # -1: a read that recorded no offset
    source: str  # "log" (the final leader's log) or the process that read it


@dataclass(frozen=True, slots=True)
class DuplicateRecord:
    value: str
    offsets: tuple[int, ...]
    process: str | None  # the producer that sent it; None when it was never sent
    idempotent: bool  # True: invariant 7 is violated


@dataclass(frozen=True, slots=True)
class Reordering:
    """``later_value`` was sent after ``earlier_value`` by ``process`` but sits before it."""

    process: str
    earlier_value: str
    earlier_offset: int
    later_value: str
    later_offset: int
    idempotent: bool  # True: the order was guaranteed, so this is an anomaly


@dataclass(frozen=True, slots=True)
class ReadBeyondHw:
    value: str
    process: str
    offset: int
    hw: int
    time_ms: int


@dataclass(frozen=True, slots=True)
class DivergentRead:
    """A read of ``offset`` returned ``value``; the final leader's log holds ``log_value``."""

    process: str
    offset: int
    value: str
    log_value: str
    time_ms: int


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: int  # the number in ARCHITECTURE.md's "Invariants"
    topic: str
    partition: int
    detail: str

    def __str__(self) -> str:
        return f"invariant {self.invariant} on {self.topic}-{self.partition}: {self.detail}"


# -- reports --------------------------------------------------------------------------------


@dataclass
class PartitionReport:
    topic: str
    partition: int
    leader: int | None  # the final leader (rule 1); None when no replica log was captured
    final_hw: int | None
    acknowledged: int = 0  # distinct values acknowledged (acks "1" or "all")
    read: int = 0  # distinct values returned by ok reads
    lost: list[LostRecord] = field(default_factory=list)
    unexpected: list[UnexpectedRecord] = field(default_factory=list)
    duplicates: list[DuplicateRecord] = field(default_factory=list)
    reordered: list[Reordering] = field(default_factory=list)
    read_beyond_hw: list[ReadBeyondHw] = field(default_factory=list)
    divergent_reads: list[DivergentRead] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def reordered_guaranteed(self) -> int:
        """Reorderings of idempotent producers: the ones that count against the run."""
        return sum(1 for r in self.reordered if r.idempotent)

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.unexpected
            or self.read_beyond_hw
            or self.divergent_reads
            or self.violations
            or self.reordered_guaranteed
        )


@dataclass
class CheckReport:
    """The verdict on one history: per-partition evidence plus every invariant violation.

    ``ok``: nothing lost, nothing unexpected, no read beyond the HW, no divergent read, no
    reordering of an idempotent producer, no invariant violated. Duplicates and reorderings of
    non-idempotent producers are reported but Kafka allows them, so they leave ``ok`` alone.
    """

    partitions: dict[tuple[str, int], PartitionReport] = field(default_factory=dict)
    invariant_violations: list[Violation] = field(default_factory=list)

    def _sum(self, count: Callable[[PartitionReport], int]) -> int:
        return sum(count(p) for p in self.partitions.values())

    @property
    def acknowledged(self) -> int:
        return self._sum(lambda p: p.acknowledged)

    @property
    def read(self) -> int:
        return self._sum(lambda p: p.read)

    @property
    def lost(self) -> int:
        return self._sum(lambda p: len(p.lost))

    @property
    def duplicated(self) -> int:
        return self._sum(lambda p: len(p.duplicates))

    @property
    def unexpected(self) -> int:
        return self._sum(lambda p: len(p.unexpected))

    @property
    def reordered(self) -> int:
        return self._sum(lambda p: len(p.reordered))

    @property
    def read_beyond_hw(self) -> int:
        return self._sum(lambda p: len(p.read_beyond_hw))

    @property
    def divergent_reads(self) -> int:
        return self._sum(lambda p: len(p.divergent_reads))

    @property
    def ok(self) -> bool:
        return not self.invariant_violations and all(p.ok for p in self.partitions.values())

    @property
    def verdict(self) -> str:
        if self.lost or self.divergent_reads:
            return "DATA LOST"
        if self.invariant_violations:
            return "INVARIANT VIOLATED"
        return "SAFE" if self.ok else "ANOMALIES"

    def counts(self) -> dict[str, int]:
        return {
            "acknowledged": self.acknowledged,
            "read": self.read,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "unexpected": self.unexpected,
            "reordered": self.reordered,
            "read_beyond_hw": self.read_beyond_hw,
            "divergent_reads": self.divergent_reads,
            "invariant_violations": len(self.invariant_violations),
        }

    def verdict_lines(self, examples_max: int = EXAMPLES_MAX) -> list[str]:
        """The text summary: the verdict line, then one line per partition and, under it, at
        most ``examples_max`` examples of each kind of anomaly."""
        lines = [f"VERDICT: {self.verdict} — {_summary(self.counts(), self._allowed())}"]
        for report in self.partitions.values():
            lines.extend(_partition_lines(report, examples_max))
        return lines

    def _allowed(self) -> tuple[int, int]:
        """(duplicates, reorderings) by non-idempotent producers: reported, allowed."""
        dup = self._sum(lambda p: sum(1 for d in p.duplicates if not d.idempotent))
        reo = self._sum(lambda p: len(p.reordered) - p.reordered_guaranteed)
        return dup, reo

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (``kafkasim check --json``)."""
        return {
            "verdict": self.verdict,
            "ok": self.ok,
            "counts": self.counts(),
            "invariant_violations": [asdict(v) for v in self.invariant_violations],
            "partitions": [
                {
                    "topic": p.topic,
                    "partition": p.partition,
                    "leader": p.leader,
                    "final_hw": p.final_hw,
                    "acknowledged": p.acknowledged,
                    "read": p.read,
                    "ok": p.ok,
                    "lost": [asdict(x) for x in p.lost],
                    "unexpected": [asdict(x) for x in p.unexpected],
                    "duplicates": [asdict(x) for x in p.duplicates],
                    "reordered": [asdict(x) for x in p.reordered],
                    "read_beyond_hw": [asdict(x) for x in p.read_beyond_hw],
                    "divergent_reads": [asdict(x) for x in p.divergent_reads],
                }
                for p in self.partitions.values()
            ],
        }


def _summary(counts: dict[str, int], allowed: tuple[int, int]) -> str:
    dup_allowed, reo_allowed = allowed
    parts = [
        f"{counts['acknowledged']} acknowledged",
        f"{counts['read']} read back",
        f"{counts['lost']} lost",
        f"{counts['duplicated']} duplicated"
        + (f" ({dup_allowed} by non-idempotent producers, allowed)" if dup_allowed else ""),
        f"{counts['unexpected']} unexpected",
        f"{counts['reordered']} reordered"
        + (f" ({reo_allowed} by non-idempotent producers, allowed)" if reo_allowed else ""),
    ]
    if counts["divergent_reads"]:
        parts.append(f"{counts['divergent_reads']} divergent reads")
    parts.append(f"{counts['invariant_violations']} invariant violations")
    return ", ".join(parts)


def _partition_lines(p: PartitionReport, examples_max: int) -> list[str]:
    leader = "none" if p.leader is None else str(p.leader)
    hw = "unknown" if p.final_hw is None else str(p.final_hw)
    status = "ok" if p.ok else "ANOMALIES"
    lines = [
        f"{p.name}: {status} — leader {leader}, HW {hw}, {p.acknowledged} acknowledged, "
        f"{p.read} read back, {len(p.lost)} lost, {len(p.duplicates)} duplicated, "
        f"{len(p.unexpected)} unexpected, {len(p.reordered)} reordered"
    ]

    def section(title: str, items: Sequence[Any], show: Callable[[Any], str]) -> None:
        if not items:
            return
        lines.append(f"  {title} ({len(items)}):")
        lines.extend(f"    {show(item)}" for item in items[:examples_max])
        if len(items) > examples_max:
            lines.append(f"    … and {len(items) - examples_max} more")

    section(
        "lost",
        p.lost,
        lambda x: f"{x.value!r} acknowledged at offset {x.offset} to {x.process} at {x.time_ms} ms",
    )
    section(
        "unexpected",
        p.unexpected,
        lambda x: f"{x.value!r} at offset {x.offset} ({x.source}), never sent to {p.name}",
    )
    section(
        "duplicated",
        p.duplicates,
        lambda x: (
            f"{x.value!r} at offsets {list(x.offsets)} from {x.process}"
            + (" (idempotent: invariant 7)" if x.idempotent else " (not idempotent: allowed)")
        ),
    )
    section(
        "reordered",
        p.reordered,
        lambda x: (
            f"{x.process} sent {x.earlier_value!r} before {x.later_value!r}, but they "
            f"sit at offsets {x.earlier_offset} and {x.later_offset}"
            + ("" if x.idempotent else " (not idempotent: allowed)")
        ),
    )
    section(
        "read beyond HW",
        p.read_beyond_hw,
        lambda x: (
            f"{x.process} read {x.value!r} at offset {x.offset} with HW {x.hw} at {x.time_ms} ms"
        ),
    )
    section(
        "divergent reads",
        p.divergent_reads,
        lambda x: (
            f"{x.process} read {x.value!r} at offset {x.offset} at {x.time_ms} ms; "
            f"the final log holds {x.log_value!r} there"
        ),
    )
    section("invariant violations", p.violations, lambda v: f"invariant {v.invariant}: {v.detail}")
    return lines


# -- the check ------------------------------------------------------------------------------


@dataclass(slots=True)
class _Send:
    """What the history says about one sent value: its first op (the invoke, normally) fixes
    the producer and the send order; ``ack`` is its first ok."""

    process: str
    idempotent: bool
    ack: Op | None = None


@dataclass(slots=True)
class _Ops:
    """One partition's operations, indexed in the single pass over ``history.ops``."""

    sends: dict[str, _Send] = field(default_factory=dict)  # insertion order = send order
    reads: list[Op] = field(default_factory=list)  # ok reads, in history order


def check(history: History) -> CheckReport:
    """Judge ``history``; see the module docstring for every rule."""
    ops: dict[TopicPartition, _Ops] = {}
    for op in history.ops:
        tp = TopicPartition(op.topic, op.partition)
        indexed = ops.get(tp)
        if indexed is None:
            indexed = ops[tp] = _Ops()
        if op.f == "send":
            send = indexed.sends.get(op.value)
            if send is None:
                send = indexed.sends[op.value] = _Send(op.process, op.idempotent)
            send.idempotent = send.idempotent or op.idempotent
            if op.type is OpType.OK and send.ack is None:
                send.ack = op
        elif op.f == "read" and op.type is OpType.OK:
            indexed.reads.append(op)

    samples: dict[TopicPartition, list[ReplicaSample]] = {}
    # Stable: samples taken at the same time keep the order the run recorded them in.
    for sample in sorted(history.samples, key=lambda s: s.time_ms):
        samples.setdefault(TopicPartition(sample.topic, sample.partition), []).append(sample)

    logs: dict[TopicPartition, dict[int, list[tuple[int, str]]]] = {}
    for (topic, partition, broker), entries in history.final_logs.items():
        logs.setdefault(TopicPartition(topic, partition), {})[broker] = entries

    keys = set(ops) | set(samples) | set(logs)
    keys |= {TopicPartition(t, p) for t, p in history.final_hw}
    report = CheckReport()
    for tp in sorted(keys):
        partition_report = _check_partition(
            tp,
            ops.get(tp, _Ops()),
            samples.get(tp, []),
            logs.get(tp, {}),
            history.final_hw.get(tp),
        )
        report.partitions[tp] = partition_report
        report.invariant_violations.extend(partition_report.violations)
    return report


def _check_partition(
    tp: TopicPartition,
    ops: _Ops,
    samples: list[ReplicaSample],
    logs: dict[int, list[tuple[int, str]]],
    final_hw: int | None,
) -> PartitionReport:
    violations: list[Violation] = []

    def violation(invariant: int, detail: str) -> None:
        violations.append(Violation(invariant, tp.topic, tp.partition, detail))

    # Rule 1: the final leader and HW.
    leader_samples = [s for s in samples if s.is_leader]
    if final_hw is None and leader_samples:
        final_hw = leader_samples[-1].high_watermark
    hw = final_hw
    leader = _final_leader(samples, logs, hw)
    committed = [] if leader is None else [(o, v) for o, v in logs[leader] if hw is None or o < hw]
    report = PartitionReport(tp.topic, tp.partition, leader, final_hw)

    # Rule 2: the final state. A value's first offset lives in `first`; only values seen at a
    # second offset pay for a set (`more`), so a clean history of 10^6 values stays small.
    first: dict[str, int] = {}
    more: dict[str, set[int]] = {}
    seen_without_offset: set[str] = set()  # a read that recorded no offset

    def place(value: str, offset: int, source: str) -> None:
        known = first.get(value)
        if known is None:
            first[value] = offset
            if value not in ops.sends:
                report.unexpected.append(UnexpectedRecord(value, offset, source))  # rule 4
        elif known != offset:
            more.setdefault(value, {known}).add(offset)

    for offset, value in committed:
        place(value, offset, "log")
    log_at = dict(committed)
    read_values: set[str] = set()
    divergent: set[tuple[int, str]] = set()
    for op in ops.reads:
        read_values.add(op.value)
        if op.offset is None:
            seen_without_offset.add(op.value)
            if op.value not in first and op.value not in ops.sends:
                report.unexpected.append(UnexpectedRecord(op.value, -1, op.process))
            continue
        place(op.value, op.offset, op.process)
        if op.hw is not None and op.offset >= op.hw:  # rule 7, invariant 3
            report.read_beyond_hw.append(
                ReadBeyondHw(op.value, op.process, op.offset, op.hw, op.time_ms)
            )
            violation(
                3,
                f"{op.process} read offset {op.offset} ({op.value!r}) at {op.time_ms} ms "
                f"from a fetch whose HW was {op.hw}",
            )
        log_value = log_at.get(op.offset)
        if (
            log_value is not None
            and log_value != op.value
            and (op.offset, op.value) not in divergent
        ):
            divergent.add((op.offset, op.value))  # rule 8
            report.divergent_reads.append(
                DivergentRead(op.process, op.offset, op.value, log_value, op.time_ms)
            )
    report.read = len(read_values)

    # Rules 3 and 6: lost and reordered acknowledged values, in send order.
    in_log = {v for _, v in committed} if leader is not None else None
    running_max: dict[str, tuple[int, str]] = {}  # process -> (highest offset so far, value)
    for value, send in ops.sends.items():
        ack = send.ack
        if ack is None or ack.acks == "0":
            continue
        report.acknowledged += 1
        position = first.get(value)
        gone = (
            value not in in_log
            if in_log is not None
            else position is None and value not in seen_without_offset
        )
        if gone:
            report.lost.append(LostRecord(value, ack.process, ack.offset, ack.time_ms))
        if position is None:
            continue
        if value in more:
            position = min(more[value])
        highest = running_max.get(send.process)
        if highest is None or position > highest[0]:
            running_max[send.process] = (position, value)
        elif position < highest[0]:
            report.reordered.append(
                Reordering(send.process, highest[1], highest[0], value, position, send.idempotent)
            )

    # Rule 5: duplicates (invariant 7 for idempotent producers).
    for value, offsets in more.items():
        sent = ops.sends.get(value)
        idempotent = sent is not None and sent.idempotent
        duplicate = DuplicateRecord(
            value, tuple(sorted(offsets)), None if sent is None else sent.process, idempotent
        )
        report.duplicates.append(duplicate)
        if idempotent:
            violation(
                7,
                f"idempotent producer {duplicate.process} wrote {value!r} at offsets "
                f"{list(duplicate.offsets)}",
            )

    for broker, entries in sorted(logs.items()):
        _check_log_offsets(broker, entries, violation)
    _check_samples(samples, violation)
    if hw is not None and leader is not None and leader_samples:
        _check_isr_prefix(leader, leader_samples, logs, committed, hw=hw, violation=violation)

    report.violations = violations
    return report


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
    leader_hw: dict[tuple[int, int], tuple[int, int]] = {}  # (broker, epoch) -> (max HW, when)
    # leader epoch -> the times and HWs of its leader's samples, in time order
    leader_times: dict[int, list[int]] = {}
    leader_hws: dict[int, list[int]] = {}
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
        best = leader_hw.get((s.broker, s.leader_epoch))
        if best is not None and s.high_watermark < best[0]:
            once(
                ("hw", s.broker, s.leader_epoch, best[0]),
                2,
                f"leader {s.broker}'s HW went back from {best[0]} ({best[1]} ms) to "
                f"{s.high_watermark} ({s.time_ms} ms) within leader epoch {s.leader_epoch}",
            )
        if best is None or s.high_watermark > best[0]:
            leader_hw[(s.broker, s.leader_epoch)] = (s.high_watermark, s.time_ms)
        leader_times.setdefault(s.leader_epoch, []).append(s.time_ms)
        leader_hws.setdefault(s.leader_epoch, []).append(s.high_watermark)

    # A follower's HW against its leader's: brokers are rarely sampled at one instant, so each
    # follower sample meets the leader's next sample of the same epoch (at the same time or
    # later). The leader's HW only grows within an epoch, so a follower above that is above
    # the leader's HW at its own sample time too.
    for s in samples:
        times = leader_times.get(s.leader_epoch)
        if s.is_leader or times is None:
            continue
        index = bisect.bisect_left(times, s.time_ms)
        if index == len(times):
            continue
        leader_hw_then = leader_hws[s.leader_epoch][index]
        if s.high_watermark > leader_hw_then:
            once(
                ("follower", s.broker, s.leader_epoch),
                2,
                f"follower {s.broker}'s HW {s.high_watermark} at {s.time_ms} ms is above its "
                f"leader's {leader_hw_then} at {times[index]} ms (leader epoch {s.leader_epoch})",
            )


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
