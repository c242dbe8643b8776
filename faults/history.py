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

Transactions (KIP-98). A transactional producer's send names its transaction in ``txn``:
``"<transactional.id>:<n>"``, the producer's transactional id and the number of the
transaction (0, 1, ... per transactional id; the runtime numbers them, one per
``begin_transaction``). The outcome of a transaction is its own op, with ``txn`` set and no
topic (``topic`` "" and ``partition`` -1, see ``Op.end``):

* ``f`` "commit" — ``commit_transaction``: ``invoke``, then ``ok`` (committed), ``fail``
  (definitely not committed: aborted) or ``info`` (unknown: a timeout, a lost coordinator);
* ``f`` "abort" — ``abort_transaction``: ``ok`` means aborted; ``fail``/``info`` leave the
  outcome unknown (the coordinator aborts it on timeout, but nobody saw that happen).

``send_offsets`` ops (``send_offsets_to_transaction``) carry the consumer offsets the
transaction commits, one op per partition: ``group``, ``topic``, ``partition`` and ``offset``
(the position committed: the next offset to consume). ``fetch_offsets`` ops record a group's
committed offset as a consumer got it back (``ok``, one per partition) when it resumed from it;
``History.final_group_offsets`` holds them as read back at the end, after the faults healed.
A read carries its consumer's ``isolation`` ("read_committed" or "read_uncommitted"; absent:
read_uncommitted, as every read before transactions). Transaction markers (control records)
found in the final logs are kept apart from the data in ``History.final_markers``.

Every field added for transactions has a default and is written only when set, so histories
written before transactions read back unchanged and old ones are written byte for byte as before.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from kafkasim.common.frozen import fast_frozen_init
from kafkasim.proto import kafkasim_pb2 as pb

READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
ISOLATION_LEVELS = (READ_COMMITTED, READ_UNCOMMITTED)
COMMIT, ABORT, SEND_OFFSETS, FETCH_OFFSETS = "commit", "abort", "send_offsets", "fetch_offsets"
TXN_FUNCTIONS = (COMMIT, ABORT)
_NAMES_TXN = frozenset((*TXN_FUNCTIONS, SEND_OFFSETS))  # the ops that must name a transaction
_NAMES_GROUP = frozenset((SEND_OFFSETS, FETCH_OFFSETS))  # and those that must name a group
MARKER_TYPES = ("COMMIT", "ABORT")  # Kafka's ControlRecordType names
# Fields written only when they differ from their default (see the module docstring).
_OPTIONAL_FIELDS = {"txn": None, "isolation": None, "group": None}


class OpType(enum.Enum):
    INVOKE = "invoke"
    OK = "ok"
    FAIL = "fail"
    INFO = "info"


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class Op:
    """One client event. ``process`` names the client (``producer-1``, ``consumer-2``);
    ``value`` is the record's value as text (every workload value is unique per run)."""

    type: OpType
    f: str  # "send", "read", "commit", "abort", "send_offsets" or "fetch_offsets"
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
    txn: str | None = None  # send, commit, abort, send_offsets: "<transactional.id>:<n>"
    isolation: str | None = None  # read: "read_committed" / "read_uncommitted" (None: the latter)
    group: str | None = None  # send_offsets, fetch_offsets: the consumer group

    def __post_init__(self) -> None:
        if self.isolation is not None and self.isolation not in ISOLATION_LEVELS:
            raise ValueError(f"isolation {self.isolation!r} is none of {ISOLATION_LEVELS}")
        if self.f in _NAMES_TXN and self.txn is None:
            raise ValueError(f"a {self.f} op names no transaction")
        if self.f in _NAMES_GROUP and (self.group is None or self.offset is None):
            raise ValueError(f"a {self.f} op needs a group and an offset")

    @property
    def read_committed(self) -> bool:
        return self.isolation == READ_COMMITTED

    @classmethod
    def end(cls, type_: OpType, f: str, process: str, *, time_ms: int, txn: str,
            error: str | None = None) -> Op:  # fmt: skip
        """A transaction's commit or abort (``f`` "commit" or "abort")."""
        if f not in TXN_FUNCTIONS:
            raise ValueError(f"{f!r} ends no transaction (one of {TXN_FUNCTIONS})")
        return cls(type_, f, process, time_ms, "", -1, "", error=error, txn=txn)

    def record(self) -> dict[str, Any]:
        """The JSON object of this op (without ``kind``)."""
        record = _fields(self)
        record["type"] = self.type.value
        for name, default in _OPTIONAL_FIELDS.items():
            if record[name] == default:
                del record[name]
        return record


@dataclass(frozen=True, slots=True)
class ReplicaSample:
    """One replica's state as its broker reported it at ``time_ms``. ``fetched_leader_epoch``
    (followers): the leader epoch of the last fetch response that set its HW, -1 for none; a
    follower below ``leader_epoch`` has not fetched from its current leader yet. None: the
    history does not say (written before it was sampled; the field is then not written)."""

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
    fetched_leader_epoch: int | None = None
    # The broker's epoch (its registration, KIP-380) when it answered; a restart gives a new
    # one. None: the history does not say (written before it was sampled; then not written).
    broker_epoch: int | None = None

    def record(self) -> dict[str, Any]:
        """The JSON object of this sample (without ``kind``)."""
        record = _fields(self)
        for name in ("fetched_leader_epoch", "broker_epoch"):
            if record[name] is None:
                del record[name]
        return record

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
            fetched_leader_epoch=r.fetched_leader_epoch,
            broker_epoch=r.broker_epoch,
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
    ``final_hw`` maps ``(topic, partition)`` to the leader's high watermark then;
    ``final_markers`` maps ``(topic, partition, broker)`` to the ``(offset, "COMMIT"|"ABORT")``
    transaction markers of that replica's log; ``final_group_offsets`` maps ``(group, topic,
    partition)`` to the group's committed offset as read back at the end."""

    ops: list[Op] = field(default_factory=list)
    samples: list[ReplicaSample] = field(default_factory=list)
    faults: list[FaultEvent] = field(default_factory=list)
    final_logs: dict[tuple[str, int, int], list[tuple[int, str]]] = field(default_factory=dict)
    final_hw: dict[tuple[str, int], int] = field(default_factory=dict)
    final_markers: dict[tuple[str, int, int], list[tuple[int, str]]] = field(default_factory=dict)
    final_group_offsets: dict[tuple[str, str, int], int] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)  # scenario name, seed, runtime …

    def add(self, op: Op) -> None:
        self.ops.append(op)

    # -- JSON lines -------------------------------------------------------------------------

    def lines(self) -> Iterator[str]:
        yield json.dumps({"kind": "meta", **self.meta}, sort_keys=True)
        for op in self.ops:
            yield json.dumps({"kind": "op", **op.record()}, sort_keys=True)
        for sample in self.samples:
            yield json.dumps({"kind": "sample", **sample.record()}, sort_keys=True)
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
        for (topic, partition, broker), markers in sorted(self.final_markers.items()):
            yield json.dumps(
                {
                    "kind": "markers",
                    "topic": topic,
                    "partition": partition,
                    "broker": broker,
                    "markers": markers,
                },
                sort_keys=True,
            )
        for (group, topic, partition), offset in sorted(self.final_group_offsets.items()):
            yield json.dumps(
                {
                    "kind": "group_offset",
                    "group": group,
                    "topic": topic,
                    "partition": partition,
                    "offset": offset,
                },
                sort_keys=True,
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
                elif kind == "markers":
                    key = (record["topic"], record["partition"], record["broker"])
                    history.final_markers[key] = [_marker(o, t) for o, t in record["markers"]]
                elif kind == "group_offset":
                    key = (record["group"], record["topic"], record["partition"])
                    history.final_group_offsets[key] = int(record["offset"])
                else:
                    raise ValueError(f"unknown kind {kind!r}")
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                raise ValueError(f"{source}:{number}: not a history line ({e})") from None
        return history

    @classmethod
    def read(cls, path: Path) -> History:
        with path.open() as f:
            return cls.parse(f, source=str(path))


def _fields(item: Op | ReplicaSample) -> dict[str, Any]:
    """``asdict`` of a flat record, without its deep copy: every field is a scalar or a tuple
    of ints, written as is (a history of thousands of ops is written in a fraction of the
    time)."""
    return {f.name: getattr(item, f.name) for f in fields(item)}


def _marker(offset: Any, marker_type: Any) -> tuple[int, str]:
    if marker_type not in MARKER_TYPES:
        raise ValueError(f"marker type {marker_type!r} is none of {MARKER_TYPES}")
    return int(offset), str(marker_type)
