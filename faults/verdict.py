"""What the history checker found: the evidence per kind (lost, duplicated, reordered, ...),
each partition's report and the whole run's, with the verdict lines and the JSON form that
``kafkasim check`` prints. The rules that produce them are ``faults.checker``'s."""

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
