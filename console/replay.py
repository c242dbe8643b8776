"""Replay of a recorded run (a history file of ``chaos``/``sim``, JSON lines) over the live
console's views: the run cut into frames, one a second, each a ``Snapshot`` made from the
replica samples and fault windows the history holds up to that time.

At time ``t`` a replica shows the last sample its broker reported at or before ``t``; a
partition's leader, ISR and leader epoch are those of the newest leader sample (the highest
leader epoch among the replicas' latest samples that say they lead). A broker is down while a
``crash`` or ``controlled_shutdown`` window covers ``t`` and paused while a ``pause`` window
does. The timeline is the difference between consecutive frames (as live) plus each fault as
it began, and the history checker's verdict on the whole run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from kafkasim.console.model import (
    DOWN,
    PAUSED,
    UP,
    BrokerState,
    Event,
    PartitionState,
    Snapshot,
    events_between,
    view,
)
from kafkasim.faults.checker import check
from kafkasim.faults.history import FaultEvent, History, ReplicaSample

__all__ = ["FRAME_MS", "Replay"]

FRAME_MS: Final = 1000
_DOWN_ACTIONS: Final = ("crash", "controlled_shutdown")


def _targets(fault: FaultEvent) -> list[int]:
    """The brokers a fault window names (``"leader:t/0 → 2"``: broker 2)."""
    _, _, listed = fault.target.rpartition("→")
    return [int(x) for x in listed.replace(" ", "").split(",") if x.strip().isdigit()]


@dataclass(frozen=True, slots=True)
class _Frame:
    snapshot: Snapshot
    events: tuple[Event, ...]


class Replay:
    """The frames of ``history``; ``view_at(t_ms)`` is what the console shows at ``t_ms``."""

    def __init__(self, history: History, *, frame_ms: int = FRAME_MS) -> None:
        self.history = history
        self.frame_ms = frame_ms
        self.brokers = sorted(
            {s.broker for s in history.samples}
            | {b for s in history.samples for b in s.replicas}
            | {b for f in history.faults for b in _targets(f)}
        )
        ends = [s.time_ms for s in history.samples] + [f.start_ms for f in history.faults]
        self.end_ms = max(ends, default=0)
        self.verdict = self._verdict()
        self._samples = sorted(history.samples, key=lambda s: s.time_ms)
        self.frames = self._frames()

    def _verdict(self) -> dict[str, Any] | None:
        if not self.history.ops:
            return None
        report = check(self.history)
        return {"ok": report.ok, "verdict": report.verdict, "lines": report.verdict_lines()}

    def snapshot_at(self, t_ms: int) -> Snapshot:
        latest: dict[tuple[str, int, int], ReplicaSample] = {}
        for s in self._samples:
            if s.time_ms > t_ms:
                break
            latest[(s.topic, s.partition, s.broker)] = s
        process = {b: UP for b in self.brokers}
        for f in self.history.faults:
            end = f.end_ms if f.end_ms is not None else self.end_ms + 1
            if f.start_ms <= t_ms < end:
                for b in _targets(f):
                    if f.action in _DOWN_ACTIONS:
                        process[b] = DOWN
                    elif f.action == "pause" and process.get(b) == UP:
                        process[b] = PAUSED
        leaders: dict[tuple[str, int], ReplicaSample] = {}
        replicas: dict[tuple[str, int], tuple[int, ...]] = {}
        for (topic, p, broker), s in latest.items():
            replicas.setdefault((topic, p), s.replicas)
            if not s.is_leader or process.get(broker) == DOWN:
                continue
            best = leaders.get((topic, p))
            if best is None or s.leader_epoch > best.leader_epoch:
                leaders[(topic, p)] = s
        partitions = []
        for (topic, p), reps in sorted(replicas.items()):
            lead = leaders.get((topic, p))
            partitions.append(
                PartitionState(topic, p, reps, -1, -1, ())
                if lead is None
                else PartitionState(topic, p, reps, lead.broker, lead.leader_epoch, lead.isr)
            )
        shown = tuple(s for s in latest.values() if process.get(s.broker) != DOWN)
        return Snapshot(
            t_ms,
            tuple(BrokerState(b, f"broker {b}", process=process[b]) for b in self.brokers),
            -1,
            tuple(partitions),
            shown,
        )

    def _frames(self) -> list[_Frame]:
        frames: list[_Frame] = []
        prev: Snapshot | None = None
        t = 0
        while True:
            snap = self.snapshot_at(t)
            events = events_between(prev, snap)
            events += [
                Event(t, "fault", f"{f.action} {f.target}")
                for f in self.history.faults
                if t - self.frame_ms < f.start_ms <= t or (t == 0 and f.start_ms <= 0)
            ]
            frames.append(_Frame(snap, tuple(events)))
            prev = snap
            if t >= self.end_ms:
                return frames
            t += self.frame_ms

    def frame_index(self, t_ms: int) -> int:
        return max(0, min(len(self.frames) - 1, -(-t_ms // self.frame_ms)))

    def view_at(self, t_ms: int) -> dict[str, Any]:
        """The view at the first frame at or after ``t_ms`` (clamped to the run)."""
        i = self.frame_index(t_ms)
        timeline = [e for f in self.frames[: i + 1] for e in f.events]
        return view(
            self.frames[i].snapshot,
            timeline,
            extra={
                "replay": {
                    "t_ms": self.frames[i].snapshot.time_ms,
                    "end_ms": self.end_ms,
                    "frame_ms": self.frame_ms,
                    "frames": len(self.frames),
                },
                "verdict": self.verdict,
            },
        )
