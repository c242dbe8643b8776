"""What the history checker found: the evidence per kind (lost, duplicated, reordered, ...),
each partition's report, the transactions' report and the whole run's, with the verdict lines
and the JSON form that ``kafkasim check`` prints. The rules that produce them are
``faults.checker``'s and, for transactions, ``faults.transactions``'."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

EXAMPLES_MAX = 10  # evidence items printed per kind and partition by verdict_lines()


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


# -- evidence about transactions (faults.transactions states each rule) ----------------------


@dataclass(frozen=True, slots=True)
class AbortedRead:
    """G1a: a read_committed consumer read a record of a transaction that aborted."""

    txn: str
    process: str  # the consumer
    topic: str
    partition: int
    offset: int | None
    value: str
    time_ms: int
    outcome: str  # how the transaction is known aborted ("abort ok at 40 ms", ...)


@dataclass(frozen=True, slots=True)
class IntermediateRead:
    """G1b: a read_committed consumer read a record of a transaction before its commit was
    even invoked (``commit_invoked_ms`` None: the commit never was)."""

    txn: str
    process: str
    topic: str
    partition: int
    offset: int | None
    value: str
    time_ms: int
    commit_invoked_ms: int | None


@dataclass(frozen=True, slots=True)
class PartialTransaction:
    """A read_committed consumer read past a committed transaction's records on a partition
    but missed some of them (``seen`` of ``records`` there): atomicity broken."""

    txn: str
    process: str
    topic: str
    partition: int
    read_past: int  # the highest offset the consumer read on the partition
    seen: int
    records: int
    missing: tuple[tuple[int, str], ...]  # (offset, value) of the records it never read


@dataclass(frozen=True, slots=True)
class OffsetsWithoutWrites:
    """A transaction's consumer offsets became visible (``observer`` got ``offset`` for the
    group and partition) while its writes did not: the transaction aborted, or some of its
    records are missing from the final logs. The input they came from is skipped for good."""

    txn: str
    group: str
    topic: str
    partition: int
    offset: int
    observer: str  # the process that got the offset back, or "final read-back"
    outcome: str  # "aborted", "committed" or "unknown"
    missing: tuple[tuple[str, int, str], ...]  # (topic, partition, value) not in the final logs


@dataclass(frozen=True, slots=True)
class WritesWithoutOffsets:
    """A committed transaction's writes are visible but the group's offset read back at the
    end is below the one the transaction committed (None: absent): its input is read again."""

    txn: str
    group: str
    topic: str
    partition: int
    offset: int
    final_offset: int | None


@dataclass(frozen=True, slots=True)
class ExactlyOnceDuplicate:
    """A read_committed consumer read one transactional value at several offsets of a
    partition: the value was committed more than once."""

    process: str
    topic: str
    partition: int
    value: str
    offsets: tuple[int, ...]
    txns: tuple[str, ...]  # the transactions the reads were attributed to ("?" unknown)


# -- reports --------------------------------------------------------------------------------


@dataclass
class TransactionReport:
    """What the transactions of a run did: how many ended how, and every anomaly found."""

    transactions: int = 0
    committed: int = 0  # commit ok
    aborted: int = 0  # abort ok or commit failed
    unknown: int = 0  # neither
    aborted_reads: list[AbortedRead] = field(default_factory=list)
    intermediate_reads: list[IntermediateRead] = field(default_factory=list)
    partial: list[PartialTransaction] = field(default_factory=list)
    offsets_without_writes: list[OffsetsWithoutWrites] = field(default_factory=list)
    writes_without_offsets: list[WritesWithoutOffsets] = field(default_factory=list)
    duplicates: list[ExactlyOnceDuplicate] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {
            "aborted_reads": len(self.aborted_reads),
            "intermediate_reads": len(self.intermediate_reads),
            "partial_transactions": len(self.partial),
            "offsets_without_writes": len(self.offsets_without_writes),
            "writes_without_offsets": len(self.writes_without_offsets),
            "exactly_once_duplicates": len(self.duplicates),
        }

    @property
    def ok(self) -> bool:
        return not any(self.counts().values())

    def lines(self, examples_max: int) -> list[str]:
        if not self.transactions:
            return []
        lines = [
            f"transactions: {'ok' if self.ok else 'ANOMALIES'} — {self.transactions} "
            f"transactions, {self.committed} committed, {self.aborted} aborted, "
            f"{self.unknown} of unknown outcome"
        ]
        _section(
            lines,
            examples_max,
            "aborted reads (G1a)",
            self.aborted_reads,
            lambda x: (
                f"{x.process} (read_committed) read {x.value!r} at {x.topic}-{x.partition} offset "
                f"{x.offset} at {x.time_ms} ms; its transaction {x.txn} aborted ({x.outcome})"
            ),
        )
        _section(
            lines,
            examples_max,
            "intermediate reads (G1b)",
            self.intermediate_reads,
            lambda x: (
                f"{x.process} (read_committed) read {x.value!r} at {x.topic}-{x.partition} offset "
                f"{x.offset} at {x.time_ms} ms; transaction {x.txn} "
                + (
                    "never invoked its commit"
                    if x.commit_invoked_ms is None
                    else f"invoked its commit only at {x.commit_invoked_ms} ms"
                )
            ),
        )
        _section(
            lines,
            examples_max,
            "committed transactions partly visible",
            self.partial,
            lambda x: (
                f"{x.process} (read_committed) read {x.topic}-{x.partition} up to offset "
                f"{x.read_past} but only {x.seen} of the {x.records} records committed there "
                f"by {x.txn}; missing {_pairs(x.missing)}"
            ),
        )
        _section(
            lines,
            examples_max,
            "offsets committed without their writes",
            self.offsets_without_writes,
            lambda x: (
                f"group {x.group} offset {x.offset} for {x.topic}-{x.partition} committed by "
                f"{x.txn} ({x.outcome}) was visible to {x.observer}, but "
                + (
                    "the transaction aborted"
                    if x.outcome == "aborted"
                    else "its writes are missing: "
                    + ", ".join(f"{v!r} on {t}-{p}" for t, p, v in x.missing[:5])
                    + (" …" if len(x.missing) > 5 else "")
                )
            ),
        )
        _section(
            lines,
            examples_max,
            "writes committed without their offsets",
            self.writes_without_offsets,
            lambda x: (
                f"{x.txn} committed its writes and group {x.group} offset {x.offset} for "
                f"{x.topic}-{x.partition}, but the group's offset at the end is "
                f"{'absent' if x.final_offset is None else x.final_offset}"
            ),
        )
        _section(
            lines,
            examples_max,
            "exactly-once duplicates",
            self.duplicates,
            lambda x: (
                f"{x.process} (read_committed) read {x.value!r} at {x.topic}-{x.partition} "
                f"offsets {list(x.offsets)} (transactions {', '.join(x.txns)})"
            ),
        )
        return lines


def _pairs(pairs: Sequence[tuple[int, str]]) -> str:
    shown = ", ".join(f"{value!r} at {offset}" for offset, value in pairs[:5])
    return shown + (" …" if len(pairs) > 5 else "")


def _section(
    lines: list[str],
    examples_max: int,
    title: str,
    items: Sequence[Any],
    show: Callable[[Any], str],
) -> None:
    """``title (n):`` then at most ``examples_max`` items, one a line, under it."""
    if not items:
        return
    lines.append(f"  {title} ({len(items)}):")
    lines.extend(f"    {show(item)}" for item in items[:examples_max])
    if len(items) > examples_max:
        lines.append(f"    … and {len(items) - examples_max} more")


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
    reordering of an idempotent producer, no invariant violated, no transaction anomaly.
    Duplicates and reorderings of non-idempotent producers are reported but Kafka allows them,
    so they leave ``ok`` alone.
    """

    partitions: dict[tuple[str, int], PartitionReport] = field(default_factory=dict)
    invariant_violations: list[Violation] = field(default_factory=list)
    transactions: TransactionReport = field(default_factory=TransactionReport)

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
        return (
            not self.invariant_violations
            and all(p.ok for p in self.partitions.values())
            and self.transactions.ok
        )

    @property
    def verdict(self) -> str:
        # Offsets visible without their writes: the input they stand for is never read again.
        if self.lost or self.divergent_reads or self.transactions.offsets_without_writes:
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
            **self.transactions.counts(),
        }

    def verdict_lines(self, examples_max: int = EXAMPLES_MAX) -> list[str]:
        """The text summary: the verdict line, then one line per partition and, under it, at
        most ``examples_max`` examples of each kind of anomaly."""
        counts = self.counts()
        lines = [f"VERDICT: {self.verdict} — {_summary(counts, self._allowed())}"]
        if counts["divergent_reads"]:
            lines.append(_divergence_note(counts))
        for report in self.partitions.values():
            lines.extend(_partition_lines(report, examples_max))
        lines.extend(self.transactions.lines(examples_max))
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
            "transactions": asdict(self.transactions),
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
    parts.extend(
        f"{counts[key]} {key.replace('_', ' ')}"
        for key in TransactionReport().counts()
        if counts[key]
    )
    return ", ".join(parts)


def _divergence_note(counts: dict[str, int]) -> str:
    """Why the counts of a run with divergent reads look as they do, said first."""
    n = counts["divergent_reads"]
    note = (
        f"  why: {n} records were read at offsets where the final log holds other records "
        "(divergent reads): the log they were read from was truncated under them (as an "
        "unclean leader election does) and those offsets were written again. 'read back' "
        "counts them, as consumers did read them, yet no final log holds them: they are "
        "among the lost"
    )
    if counts["reordered"]:
        note += (
            "; the records written again at their offsets sit before records their "
            "producers sent earlier: the reordered"
        )
    return note + "."


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
        _section(lines, examples_max, title, items, show)

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
