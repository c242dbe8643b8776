"""The replica manager's domain values: what each partition request asks and what it answers,
free of any wire format (Kafka's ``FetchParams``, ``FetchPartitionData``, ``PartitionResponse``
of ``appendRecords``, ``LeaderAndIsrPartitionState``, ...).

Every front door translates its requests into these and these into its responses: the gRPC one
in ``node.apis_replica``; Kafka's binary protocol fills the same fields from its own structs
(a Produce's per-partition record set is the raw ``records`` bytes; a Fetch's
``replica_id``/``max_wait_ms``/``min_bytes``/``max_bytes``/``isolation_level`` and per-partition
fetch offset, current leader epoch, log start offset and partition max bytes are the fields of
Kafka's FetchRequest). The replica manager takes and returns nothing else.

An ``error`` is a :class:`~common.errors.KafkaError` instance (its ``code`` goes on a wire, its
``message`` with it) or ``None``. Offsets and epochs not known are -1, as on Kafka's wire.
Partitions are answered in the order asked, once per entry (a request naming a partition twice
gets two answers).
"""

from __future__ import annotations

from dataclasses import dataclass

from kafkasim.common.errors import KafkaError
from kafkasim.common.frozen import fast_frozen_init
from kafkasim.common.types import TopicPartition
from kafkasim.storage.file_records import Buffer
from kafkasim.storage.producer_state import AppendOrigin
from kafkasim.storage.records.batch import ControlRecordType

CONSUMER_REPLICA_ID = -1  # a fetch or ListOffsets from a client, not a follower
NO_EPOCH = -1  # current leader epoch -1: do not check (KIP-320)
HIGH_WATERMARK_OFFSET = -1  # DeleteRecords: "up to the high watermark"
READ_UNCOMMITTED = 0
READ_COMMITTED = 1


# -- Produce (Kafka's ReplicaManager.appendRecords) --------------------------------------------


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class PartitionRecords:
    """One partition's part of a produce: one or more RecordBatch v2, as the client sent them
    (over gRPC a view into the request's received bytes: ``node.produce_wire``)."""

    tp: TopicPartition
    records: Buffer


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class ProduceParams:
    """``acks``: 0, 1 or -1 (all); ``timeout_ms``: how long acks=all may wait for the ISR;
    ``origin``: who appends — a client (every check, no control batch) or the broker's own
    coordinators (transaction markers: epochs checked, not sequences; Kafka's
    ``AppendOrigin``)."""

    acks: int
    timeout_ms: int
    partitions: tuple[PartitionRecords, ...]
    origin: AppendOrigin = AppendOrigin.CLIENT


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class ProducePartitionResult:
    """Kafka's ``PartitionResponse``: the base offset given to the first batch, the log append
    time (-1 unless the topic uses LogAppendTime) and the log start offset after the append."""

    tp: TopicPartition
    error: KafkaError | None = None
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1


# -- Fetch (Kafka's FetchParams and FetchPartitionData) ----------------------------------------


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class FetchPartitionParams:
    """One partition of a fetch: read from ``fetch_offset``; ``log_start_offset`` is the
    follower's own (-1 from consumers); ``partition_max_bytes`` 0: only the request's limit."""

    tp: TopicPartition
    fetch_offset: int
    current_leader_epoch: int = NO_EPOCH
    log_start_offset: int = -1
    partition_max_bytes: int = 0


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class FetchParams:
    """Kafka's ``FetchParams``: a follower's (``replica_id`` ≥ 0) or a consumer's fetch,
    long-polling up to ``max_wait_ms`` until ``min_bytes`` are there; ``max_bytes`` 0: the
    default response limit. A follower reads to the log end; a consumer to the HW
    (READ_UNCOMMITTED) or to the last stable offset (READ_COMMITTED, Kafka's
    ``FetchIsolation.of``)."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    partitions: tuple[FetchPartitionParams, ...]
    isolation_level: int = READ_UNCOMMITTED

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """An aborted transaction a ``read_committed`` consumer must drop: the batches of
    ``producer_id`` from ``first_offset`` up to its ABORT marker (Kafka's
    ``FetchResponseData.AbortedTransaction``)."""

    producer_id: int
    first_offset: int


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class FetchPartitionData:
    """Kafka's ``FetchPartitionData``: whole batches from the fetch offset, never past the HW
    (read_uncommitted) or the last stable offset (read_committed) for a consumer, with the
    partition's watermarks as of the read. ``aborted_transactions``: those overlapping what a
    read_committed fetch returns (possibly none); None for any other fetch (Kafka sends null).
    """

    tp: TopicPartition
    error: KafkaError | None = None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    aborted_transactions: tuple[AbortedTransaction, ...] | None = None


# -- WriteTxnMarkers (Kafka's KafkaApis.handleWriteTxnMarkersRequest) -------------------------


@dataclass(frozen=True, slots=True)
class TxnMarkerEntry:
    """One transaction's marker for the partitions this broker leads: ``result`` COMMIT or
    ABORT, written with the producer's id and epoch and the coordinator's epoch."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    result: ControlRecordType
    partitions: tuple[TopicPartition, ...]


@dataclass(frozen=True, slots=True)
class WriteTxnMarkersParams:
    markers: tuple[TxnMarkerEntry, ...]


@dataclass(frozen=True, slots=True)
class TxnMarkerResult:
    """A marker's answer: one error (or None) per partition, in the order asked."""

    producer_id: int
    partitions: tuple[tuple[TopicPartition, KafkaError | None], ...]


# -- ListOffsets, OffsetsForLeaderEpoch --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListOffsetsPartition:
    """``timestamp``: -1 latest, -2 earliest, -4 earliest local, -3 max timestamp, else a time."""

    tp: TopicPartition
    timestamp: int
    current_leader_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class ListOffsetsParams:
    replica_id: int
    partitions: tuple[ListOffsetsPartition, ...]
    isolation_level: int = READ_UNCOMMITTED


@dataclass(frozen=True, slots=True)
class ListOffsetsPartitionResult:
    tp: TopicPartition
    error: KafkaError | None = None
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class EpochRequest:
    """Where ``leader_epoch`` ends in the leader's log (KIP-279: the largest epoch ≤ it)."""

    tp: TopicPartition
    leader_epoch: int
    current_leader_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    tp: TopicPartition
    error: KafkaError | None = None
    leader_epoch: int = -1
    end_offset: int = -1


# -- DescribeReplicas (kafkasim's own admin call) ----------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    """What this broker holds of a partition; ``isr`` as the leader knows it (followers: as
    last told), ``replicas`` the assigned replicas as last told."""

    tp: TopicPartition
    broker_id: int
    is_leader: bool
    leader: int
    leader_epoch: int
    high_watermark: int
    log_end_offset: int
    log_start_offset: int
    isr: tuple[int, ...]
    size_bytes: int
    replicas: tuple[int, ...]
    fetched_leader_epoch: int = -1  # see ``Partition.fetched_leader_epoch``


@dataclass(frozen=True, slots=True)
class DescribeReplicasResult:
    """``monotonic_ms``: the broker's monotonic clock when it answered."""

    monotonic_ms: int
    replicas: tuple[ReplicaDescription, ...]


# -- DeleteRecords (Kafka's ReplicaManager.deleteRecords) --------------------------------------


@dataclass(frozen=True, slots=True)
class DeleteRecordsPartition:
    """Move the log start offset to ``offset`` (-1: the high watermark)."""

    tp: TopicPartition
    offset: int


@dataclass(frozen=True, slots=True)
class DeleteRecordsParams:
    timeout_ms: int
    partitions: tuple[DeleteRecordsPartition, ...]


@dataclass(frozen=True, slots=True)
class DeleteRecordsPartitionResult:
    tp: TopicPartition
    error: KafkaError | None = None
    low_watermark: int = -1


# -- LeaderAndIsr, StopReplica (from the controller) -------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaderAndIsrPartitionState:
    """Kafka's ``LeaderAndIsrPartitionState``: the controller's word on one partition."""

    tp: TopicPartition
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LeaderAndIsrParams:
    controller_id: int
    controller_epoch: int
    partition_states: tuple[LeaderAndIsrPartitionState, ...]


@dataclass(frozen=True, slots=True)
class StopReplicaPartition:
    tp: TopicPartition
    delete_partition: bool
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class StopReplicaParams:
    controller_id: int
    controller_epoch: int
    partitions: tuple[StopReplicaPartition, ...]


@dataclass(frozen=True, slots=True)
class PartitionErrors:
    """The answer to LeaderAndIsr and StopReplica: a request-level ``error`` (then no
    partition was touched) or one entry per partition, in the order asked. ``new_leaders``:
    the partitions this LeaderAndIsr made this broker the leader of (it did not lead them
    before: Kafka's ``partitionsBecomeLeader``, whose coordinators load on election; a new
    leader epoch of a partition it already leads is not an election)."""

    error: KafkaError | None = None
    partitions: tuple[tuple[TopicPartition, KafkaError | None], ...] = ()
    new_leaders: frozenset[TopicPartition] = frozenset()

    def failed(self) -> frozenset[TopicPartition]:
        return frozenset(tp for tp, error in self.partitions if error is not None)
