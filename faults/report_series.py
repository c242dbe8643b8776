"""What the HTML report of a run draws, derived from its history: pure, values in, values out
(``derive(history, report) -> ReportSeries``); ``faults.report`` only draws it.

Theory of operation. A history holds replica samples (each broker's view of a partition every
``sample_interval_ms``, 500 ms by default), client operations and fault windows. From them, per
partition:

1. *Who led when.* Every sample in which a broker names itself leader is a sighting of
   ``(broker, leader epoch)``; one leadership interval per pair runs from its first sighting to
   its last, drawn on by one sampling period (the leader presumably led until the next sample
   would have come) but never past the start of a later epoch. A deposed leader cut off from
   ZooKeeper keeps reporting its old epoch (a zombie): its interval overlaps the new one.
2. *Unclean elections.* A leader of epoch e that was not in the ISR the previous epoch's
   leader last reported (before e began) was elected from outside the ISR: Kafka's unclean
   leader election (``unclean.leader.election.enable``). Epoch 0 (the first election) is clean.
3. *ISR steps.* The ISR as the current leader reports it (samples of a stale epoch, a zombie's,
   are skipped), one step per change: which brokers, not how many.
4. *HW and LEO per replica*, as sampled.
5. *Truncations.* Observed: a replica's log end offset falls between two of its samples.
   Inferred: acknowledged records the checker reports lost were appended by the broker that
   led when they were acknowledged; when that broker is later seen following a newer epoch it
   has truncated them (Kafka's follower truncates to the new leader's epoch boundary,
   KIP-101/279; at 500 ms sampling a restarted follower usually truncates and catches up
   between two samples, so the fall itself is rarely seen). It is marked where the broker is
   first seen as a follower of a later epoch, from the highest log end offset it reported as
   leader down to the lowest lost offset (the epoch boundary may lie lower: records the old
   leader had appended but nobody acknowledged leave no trace in the history).
6. *Lost ranges.* The offsets of the acknowledged records the checker reports lost, and of
   reads that diverged from the final log, as runs of consecutive offsets.

And for the whole run: throughput per second (acknowledged sends, records read) and send
latency (p50 and max per second), each on its own scale in the report, and the fault windows
laid out in lanes so that overlapping windows never share a row.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kafkasim.faults.history import FaultEvent, History, OpType, ReplicaSample
from kafkasim.faults.verdict import CheckReport, PartitionReport

SAMPLE_PERIOD_MS_DEFAULT = 500  # faults.workload's sample_interval_ms


@dataclass(frozen=True, slots=True)
class LeaderInterval:
    """``broker`` led ``leader_epoch`` from ``start_ms`` to ``end_ms`` (rule 1); ``unclean``:
    it was elected from outside the ISR (rule 2)."""

    broker: int
    leader_epoch: int
    start_ms: int
    end_ms: int
    unclean: bool = False


@dataclass(frozen=True, slots=True)
class UncleanElection:
    """``broker`` became leader of ``leader_epoch`` at ``time_ms`` though the ISR the previous
    leader last reported, ``isr_before``, did not hold it."""

    time_ms: int
    broker: int
    leader_epoch: int
    isr_before: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class IsrStep:
    """From ``time_ms`` on, the leader of ``leader_epoch`` reports the ISR ``isr``."""

    time_ms: int
    leader_epoch: int
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ReplicaPoint:
    time_ms: int
    high_watermark: int
    log_end_offset: int


@dataclass(frozen=True, slots=True)
class Truncation:
    """``broker``'s log was cut from ``from_offset`` (its log end offset before) down to
    ``to_offset``, seen at ``time_ms``; ``observed``: the fall was sampled, else inferred from
    lost records (rule 5)."""

    time_ms: int
    broker: int
    from_offset: int
    to_offset: int
    observed: bool


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``first``..``last`` (inclusive) holding ``records`` records of one kind:
    ``"lost"`` (acknowledged, not in the final log) or ``"divergent"`` (read, then replaced)."""

    kind: str
    first: int
    last: int
    records: int


@dataclass(frozen=True, slots=True)
class PartitionSeries:
    topic: str
    partition: int
    replicas: tuple[int, ...]  # every broker sampled for the partition, ascending
    leaders: tuple[LeaderInterval, ...]  # by start time
    unclean_elections: tuple[UncleanElection, ...]
    isr: tuple[IsrStep, ...]
    points: dict[int, tuple[ReplicaPoint, ...]]  # broker -> samples by time
    truncations: tuple[Truncation, ...]
    ranges: tuple[OffsetRange, ...]

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """A fault from ``start_ms`` to ``end_ms`` (None: an instant, such as a crash with no
    restart) drawn in ``lane`` (0, 1, ...; windows of one lane never overlap)."""

    start_ms: int
    end_ms: int | None
    action: str
    target: str
    lane: int

    @property
    def label(self) -> str:
        return f"{self.action} {self.target}".strip()


@dataclass(frozen=True, slots=True)
class Throughput:
    """Per second of the run (``seconds[i]``): acknowledged sends, records read, and the send
    latency (invoke to acknowledgement) p50 and max of the sends acknowledged in it (None:
    nothing acknowledged that second)."""

    seconds: tuple[int, ...]
    acknowledged: tuple[int, ...]
    read: tuple[int, ...]
    latency_p50_ms: tuple[int | None, ...]
    latency_max_ms: tuple[int | None, ...]


@dataclass(frozen=True, slots=True)
class ReportSeries:
    end_ms: int
    sample_period_ms: int
    faults: tuple[FaultWindow, ...]
    throughput: Throughput
    partitions: tuple[PartitionSeries, ...]


def derive(history: History, report: CheckReport) -> ReportSeries:
    """Everything the report draws (the module docstring's rules)."""
    end_ms = max(
        [op.time_ms for op in history.ops]
        + [s.time_ms for s in history.samples]
        + [f.end_ms or f.start_ms for f in history.faults]
        + [1000]
    )
    period = sample_period_ms(history.samples)
    by_partition: dict[tuple[str, int], list[ReplicaSample]] = defaultdict(list)
    for sample in sorted(history.samples, key=lambda s: s.time_ms):
        by_partition[(sample.topic, sample.partition)].append(sample)
    partitions = tuple(
        partition_series(
            topic, partition, samples, report.partitions.get((topic, partition)), period=period
        )
        for (topic, partition), samples in sorted(by_partition.items())
    )
    return ReportSeries(
        end_ms=end_ms,
        sample_period_ms=period,
        faults=fault_lanes(history.faults),
        throughput=throughput(history, end_ms),
        partitions=partitions,
    )


def sample_period_ms(samples: Sequence[ReplicaSample]) -> int:
    """The median gap between two samples of one replica (the default without two)."""
    last: dict[tuple[str, int, int], int] = {}
    gaps: list[int] = []
    for s in sorted(samples, key=lambda s: s.time_ms):
        key = (s.topic, s.partition, s.broker)
        if key in last and s.time_ms > last[key]:
            gaps.append(s.time_ms - last[key])
        last[key] = s.time_ms
    return sorted(gaps)[len(gaps) // 2] if gaps else SAMPLE_PERIOD_MS_DEFAULT


def partition_series(
    topic: str,
    partition: int,
    samples: Sequence[ReplicaSample],
    verdict: PartitionReport | None,
    *,
    period: int,
) -> PartitionSeries:
    """One partition's series from its samples (sorted by time) and its verdict."""
    leaders, unclean = leader_intervals(samples, period=period)
    points: dict[int, list[ReplicaPoint]] = defaultdict(list)
    for s in samples:
        points[s.broker].append(ReplicaPoint(s.time_ms, s.high_watermark, s.log_end_offset))
    lost = verdict.lost if verdict is not None else []
    return PartitionSeries(
        topic=topic,
        partition=partition,
        replicas=tuple(sorted(points)),
        leaders=leaders,
        unclean_elections=unclean,
        isr=isr_steps(samples),
        points={b: tuple(p) for b, p in sorted(points.items())},
        truncations=truncations(
            samples, leaders, [(r.offset, r.time_ms) for r in lost if r.offset is not None]
        ),
        ranges=(
            *offset_ranges("lost", (r.offset for r in lost if r.offset is not None)),
            *offset_ranges(
                "divergent", (d.offset for d in verdict.divergent_reads) if verdict else ()
            ),
        ),
    )


def leader_intervals(
    samples: Sequence[ReplicaSample], *, period: int
) -> tuple[tuple[LeaderInterval, ...], tuple[UncleanElection, ...]]:
    """Rules 1 and 2 over one partition's samples (sorted by time)."""
    seen: dict[tuple[int, int], list[int]] = {}  # (broker, epoch) -> [first, last]
    isr_at: list[tuple[int, int, tuple[int, ...]]] = []  # leader samples: (time, epoch, isr)
    for s in samples:
        if not s.is_leader:
            continue
        span = seen.setdefault((s.broker, s.leader_epoch), [s.time_ms, s.time_ms])
        span[1] = s.time_ms
        isr_at.append((s.time_ms, s.leader_epoch, s.isr))
    intervals: list[LeaderInterval] = []
    elections: list[UncleanElection] = []
    sampled_until = samples[-1].time_ms if samples else 0
    for (broker, epoch), (first, last) in sorted(seen.items(), key=lambda kv: kv[1][0]):
        later = [f for (_, e), (f, _) in seen.items() if e > epoch and f > last]
        end = max(last, min([last + period, sampled_until, *later]))
        before = [isr for t, e, isr in isr_at if e < epoch and t <= first]
        unclean = bool(before) and broker not in before[-1]
        if unclean:
            elections.append(UncleanElection(first, broker, epoch, before[-1]))
        intervals.append(LeaderInterval(broker, epoch, first, end, unclean))
    return tuple(intervals), tuple(elections)


def isr_steps(samples: Sequence[ReplicaSample]) -> tuple[IsrStep, ...]:
    """Rule 3: the ISR the current leader reports, one step per change."""
    steps: list[IsrStep] = []
    epoch_max = -1
    for s in samples:
        if not s.is_leader or s.leader_epoch < epoch_max:
            continue
        epoch_max = s.leader_epoch
        if not steps or steps[-1].isr != s.isr:
            steps.append(IsrStep(s.time_ms, s.leader_epoch, s.isr))
    return tuple(steps)


def truncations(samples: Sequence[ReplicaSample], leaders: Sequence[LeaderInterval],
                lost: Sequence[tuple[int, int]]) -> tuple[Truncation, ...]:  # fmt: skip
    """Rule 5. ``lost``: (offset, acknowledged at ms) of the partition's lost records."""
    by_broker: dict[int, list[ReplicaSample]] = defaultdict(list)
    for s in samples:
        by_broker[s.broker].append(s)
    found: list[Truncation] = []
    for broker, own in by_broker.items():
        for before, after in itertools.pairwise(own):
            if after.log_end_offset < before.log_end_offset:
                found.append(
                    Truncation(
                        after.time_ms,
                        broker,
                        before.log_end_offset,
                        after.log_end_offset,
                        observed=True,
                    )
                )
    # Inferred: the lost offsets, by the broker that acknowledged them and the sample in which
    # it is first seen following a later epoch (its leaderships before that truncate at once).
    cut: dict[tuple[int, int], list[int]] = defaultdict(list)  # (broker, seen at) -> offsets
    leo_before: dict[tuple[int, int], int] = defaultdict(int)
    for offset, time_ms in lost:
        leader = _leader_at(leaders, time_ms)
        if leader is None:
            continue
        own = by_broker[leader.broker]
        rejoined = next(
            (
                s
                for s in own
                if not s.is_leader
                and s.time_ms > leader.start_ms
                and s.leader_epoch > leader.leader_epoch
            ),
            None,
        )
        if rejoined is None:
            continue  # never seen following again: the records went with the broker
        key = (leader.broker, rejoined.time_ms)
        cut[key].append(offset)
        leo_before[key] = max(
            [leo_before[key]]
            + [s.log_end_offset for s in own if s.time_ms < rejoined.time_ms and s.is_leader]
        )
    for (broker, seen_ms), offsets in cut.items():
        if any(
            t.broker == broker and t.time_ms <= seen_ms and t.to_offset <= min(offsets)
            for t in found
            if t.observed
        ):
            continue  # the fall itself was sampled
        found.append(
            Truncation(
                seen_ms,
                broker,
                max(leo_before[(broker, seen_ms)], max(offsets) + 1),
                min(offsets),
                observed=False,
            )
        )
    return tuple(sorted(found, key=lambda t: (t.time_ms, t.broker)))


def _leader_at(leaders: Sequence[LeaderInterval], time_ms: int) -> LeaderInterval | None:
    """The leadership covering ``time_ms`` (the latest begun, among overlapping ones), else
    the last one begun before it."""
    begun = [i for i in leaders if i.start_ms <= time_ms]
    covering = [i for i in begun if time_ms <= i.end_ms]
    chosen = covering or begun
    return max(chosen, key=lambda i: (i.start_ms, i.leader_epoch)) if chosen else None


def offset_ranges(kind: str, offsets: Iterable[int]) -> list[OffsetRange]:
    """Runs of consecutive offsets (rule 6)."""
    ranges: list[OffsetRange] = []
    for offset in sorted(set(offsets)):
        if ranges and offset == ranges[-1].last + 1:
            last = ranges[-1]
            ranges[-1] = OffsetRange(kind, last.first, offset, last.records + 1)
        else:
            ranges.append(OffsetRange(kind, offset, offset, 1))
    return ranges


def fault_lanes(faults: Sequence[FaultEvent]) -> tuple[FaultWindow, ...]:
    """The fault windows by start, each in the first lane free at its start."""
    lane_ends: list[int] = []
    windows: list[FaultWindow] = []
    for f in sorted(faults, key=lambda f: (f.start_ms, f.action, f.target)):
        end = f.end_ms if f.end_ms is not None else f.start_ms
        lane = next((i for i, e in enumerate(lane_ends) if e < f.start_ms), len(lane_ends))
        if lane == len(lane_ends):
            lane_ends.append(end)
        else:
            lane_ends[lane] = end
        windows.append(FaultWindow(f.start_ms, f.end_ms, f.action, f.target, lane))
    return tuple(windows)


def throughput(history: History, end_ms: int) -> Throughput:
    """Acknowledged sends, reads and send latency per second of the run."""
    seconds = end_ms // 1000 + 1
    acknowledged = [0] * seconds
    read = [0] * seconds
    latencies: list[list[int]] = [[] for _ in range(seconds)]
    invoked: dict[str, int] = {}
    for op in history.ops:
        second = min(op.time_ms // 1000, seconds - 1)
        if op.f == "send" and op.type is OpType.INVOKE:
            invoked[op.value] = op.time_ms
        elif op.f == "send" and op.type is OpType.OK:
            acknowledged[second] += 1
            if op.value in invoked:
                latencies[second].append(op.time_ms - invoked[op.value])
        elif op.f == "read" and op.type is OpType.OK:
            read[second] += 1
    ordered = [sorted(v) for v in latencies]
    return Throughput(
        seconds=tuple(range(seconds)),
        acknowledged=tuple(acknowledged),
        read=tuple(read),
        latency_p50_ms=tuple(v[len(v) // 2] if v else None for v in ordered),
        latency_max_ms=tuple(v[-1] if v else None for v in ordered),
    )
