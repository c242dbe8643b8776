"""What a failure-injection run records: every client operation (Jepsen's history), samples of
every replica's state over time, and each replica's log at the end.

The same types serve every backend of a run (the simulation, processes, containers), so one
checker (``faults.checker``) judges both. A history is written as JSON lines (one object per line,
``kind`` first) so that a run can be checked again later (``kafkasim check FILE``).

Operations follow Jepsen's model: a ``send`` is recorded when it is invoked (``invoke``) and
again when its outcome is known: ``ok`` (acknowledged, with its offset), ``fail`` (definitely
not written: an error the producer was told the record was not appended with) or ``info``
(unknown: a timeout or a lost connection; it may or may not have been written). A ``read`` is
recorded once per record a consumer received, ``ok``, with the high watermark of the fetch
response that carried it. Times are milliseconds since the start of the run (virtual in the
simulation, monotonic in real runs).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kafkasim.proto import kafkasim_pb2 as pb


class OpType(enum.Enum):
    INVOKE = "invoke"
    OK = "ok"
    FAIL = "fail"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Op:
    """One client event. ``process`` names the client (``producer-1``, ``consumer-2``);
    ``value`` is the record's value as text (every workload value is unique per run)."""

    type: OpType
    f: str  # "send" or "read"
    process: str
    time_ms: int
    topic: str
    partition: int
    value: str
    offset: int | None = None  # send ok: the offset acknowledged; read: the offset read
    hw: int | None = None  # read: the high watermark of the fetch that returned it
    error: str | None = None  # fail / info: why
    idempotent: bool = False  # send: the producer is idempotent (invariant 7 applies)
    acks: str = "all"  # send: the producer's acks ("0", "1", "all")


@dataclass(frozen=True, slots=True)
class ReplicaSample:
    """One replica's state as its broker reported it at ``time_ms``."""

    time_ms: int
    broker: int
    topic: str
    partition: int
    is_leader: bool
    leader: int
    leader_epoch: int
    high_watermark: int
    log_end_offset: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]

    @classmethod
    def from_state(cls, time_ms: int, r: pb.ReplicaState) -> ReplicaSample:
        """A sample from a DescribeReplicas answer's replica state."""
        return cls(
            time_ms=time_ms,
            broker=r.broker_id,
            topic=r.topic,
            partition=r.partition,
            is_leader=r.is_leader,
            leader=r.leader,
            leader_epoch=r.leader_epoch,
            high_watermark=r.high_watermark,
            log_end_offset=r.log_end_offset,
            isr=tuple(sorted(r.isr)),
            replicas=tuple(r.replicas),
        )


@dataclass(frozen=True, slots=True)
class FaultEvent:
    """A fault window: what was done to whom, from ``start_ms`` to ``end_ms`` (None: until
    the end of the run or not a window, such as a crash)."""

    start_ms: int
    action: str
    target: str
    end_ms: int | None = None


@dataclass
class History:
    """A run's record. ``final_logs`` maps ``(topic, partition, broker)`` to the
    ``(offset, value)`` pairs of that replica's log at the end (after the faults healed);
    ``final_hw`` maps ``(topic, partition)`` to the leader's high watermark then."""

    ops: list[Op] = field(default_factory=list)
    samples: list[ReplicaSample] = field(default_factory=list)
    faults: list[FaultEvent] = field(default_factory=list)
    final_logs: dict[tuple[str, int, int], list[tuple[int, str]]] = field(default_factory=dict)
    final_hw: dict[tuple[str, int], int] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)  # scenario name, seed, runtime …

    def add(self, op: Op) -> None:
        self.ops.append(op)

    # -- JSON lines -------------------------------------------------------------------------

    def lines(self) -> Iterator[str]:
        yield json.dumps({"kind": "meta", **self.meta}, sort_keys=True)
        for op in self.ops:
            record = asdict(op)
            record["type"] = op.type.value
            yield json.dumps({"kind": "op", **record}, sort_keys=True)
        for sample in self.samples:
            yield json.dumps({"kind": "sample", **asdict(sample)}, sort_keys=True)
        for fault in self.faults:
            yield json.dumps({"kind": "fault", **asdict(fault)}, sort_keys=True)
        for (topic, partition, broker), entries in sorted(self.final_logs.items()):
            yield json.dumps(
                {
                    "kind": "log",
                    "topic": topic,
                    "partition": partition,
                    "broker": broker,
                    "entries": entries,
                },
                sort_keys=True,
            )
        for (topic, partition), hw in sorted(self.final_hw.items()):
            yield json.dumps(
                {"kind": "hw", "topic": topic, "partition": partition, "hw": hw}, sort_keys=True
            )

    def write(self, path: Path) -> None:
        path.write_text("".join(line + "\n" for line in self.lines()))

    @classmethod
    def parse(cls, lines: Iterable[str], *, source: str = "history") -> History:
        """Read JSON lines back; ValueError naming the line for anything malformed."""
        history = cls()
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                kind = record.pop("kind")
                if kind == "meta":
                    history.meta = record
                elif kind == "op":
                    record["type"] = OpType(record["type"])
                    history.ops.append(Op(**record))
                elif kind == "sample":
                    record["isr"] = tuple(record["isr"])
                    record["replicas"] = tuple(record["replicas"])
                    history.samples.append(ReplicaSample(**record))
                elif kind == "fault":
                    history.faults.append(FaultEvent(**record))
                elif kind == "log":
                    key = (record["topic"], record["partition"], record["broker"])
                    history.final_logs[key] = [(int(o), str(v)) for o, v in record["entries"]]
                elif kind == "hw":
                    history.final_hw[(record["topic"], record["partition"])] = record["hw"]
                else:
                    raise ValueError(f"unknown kind {kind!r}")
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise ValueError(f"{source}:{number}: not a history line ({e})") from None
        return history

    @classmethod
    def read(cls, path: Path) -> History:
        with path.open() as f:
            return cls.parse(f, source=str(path))
