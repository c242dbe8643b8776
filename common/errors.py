"""The one error hierarchy of kafkasim.

::

    KafkasimError                       anything kafkasim raises on purpose
    ├── KafkaError                      an error with a Kafka error code, name and retriable flag
    │   ├── OffsetOutOfRangeError           OFFSET_OUT_OF_RANGE (1)
    │   ├── CorruptRecordError              CORRUPT_MESSAGE (2), retriable
    │   ├── UnknownTopicOrPartitionError    UNKNOWN_TOPIC_OR_PARTITION (3), retriable
    │   ├── NotLeaderOrFollowerError        NOT_LEADER_OR_FOLLOWER (6), retriable
    │   ├── RecordTooLargeError             MESSAGE_TOO_LARGE (10)
    │   ├── InvalidTimestampError           INVALID_TIMESTAMP (32)
    │   ├── InvalidConfigError              INVALID_CONFIG (40)
    │   ├── KafkaStorageError               KAFKA_STORAGE_ERROR (56), retriable
    │   ├── UnsupportedCompressionTypeError UNSUPPORTED_COMPRESSION_TYPE (76)
    │   ├── InvalidRecordError              INVALID_RECORD (87)
    │   └── ... one class per row of ``_ERROR_TABLE`` (see ``error_for_code``)
    ├── StorageInternalError            a broken invariant inside the storage engine (no Kafka code)
    │   ├── CorruptIndexError               an index file failed its sanity check
    │   ├── InvalidOffsetError              an index or log append out of offset order
    │   └── InconsistentBrokerMetadataError log dirs disagree in meta.properties
    └── IllegalTxnTransitionError       a transaction coordinator asked to make a transition
                                        Kafka's TransactionMetadata refuses (no Kafka code)

Errors are split the h11 way: a :class:`KafkaError` travels to a peer (its ``code`` goes on
the wire); a :class:`StorageInternalError` or :class:`IllegalTxnTransitionError` is our own
broken invariant and never does.
"""

from __future__ import annotations

from typing import ClassVar


class KafkasimError(Exception):
    """Base of every error kafkasim raises on purpose."""


class KafkaError(KafkasimError):
    """An error that carries Kafka's error ``code``, ``name`` and ``retriable`` flag."""

    code: ClassVar[int] = -1
    error_name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    retriable: ClassVar[bool] = False

    def __init__(self, message: str = "") -> None:
        super().__init__(f"{self.error_name}: {message}" if message else self.error_name)
        self.message = message


# code, name, retriable — Kafka's org.apache.kafka.common.protocol.Errors (the subset we use).
_ERROR_TABLE: tuple[tuple[int, str, bool], ...] = (
    (-1, "UNKNOWN_SERVER_ERROR", False),
    (1, "OFFSET_OUT_OF_RANGE", False),
    (2, "CORRUPT_MESSAGE", True),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", True),
    (4, "INVALID_FETCH_SIZE", False),
    (5, "LEADER_NOT_AVAILABLE", True),
    (6, "NOT_LEADER_OR_FOLLOWER", True),
    (7, "REQUEST_TIMED_OUT", True),
    (8, "BROKER_NOT_AVAILABLE", False),
    (9, "REPLICA_NOT_AVAILABLE", True),
    (10, "MESSAGE_TOO_LARGE", False),
    (11, "STALE_CONTROLLER_EPOCH", False),
    (12, "OFFSET_METADATA_TOO_LARGE", False),
    (13, "NETWORK_EXCEPTION", True),
    (14, "COORDINATOR_LOAD_IN_PROGRESS", True),
    (15, "COORDINATOR_NOT_AVAILABLE", True),
    (16, "NOT_COORDINATOR", True),
    (17, "INVALID_TOPIC_EXCEPTION", False),
    (18, "RECORD_LIST_TOO_LARGE", False),
    (19, "NOT_ENOUGH_REPLICAS", True),
    (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True),
    (21, "INVALID_REQUIRED_ACKS", False),
    (22, "ILLEGAL_GENERATION", False),
    (23, "INCONSISTENT_GROUP_PROTOCOL", False),
    (24, "INVALID_GROUP_ID", False),
    (25, "UNKNOWN_MEMBER_ID", False),
    (26, "INVALID_SESSION_TIMEOUT", False),
    (27, "REBALANCE_IN_PROGRESS", False),
    (28, "INVALID_COMMIT_OFFSET_SIZE", False),
    (29, "TOPIC_AUTHORIZATION_FAILED", False),
    (30, "GROUP_AUTHORIZATION_FAILED", False),
    (31, "CLUSTER_AUTHORIZATION_FAILED", False),
    (32, "INVALID_TIMESTAMP", False),
    (33, "UNSUPPORTED_SASL_MECHANISM", False),
    (34, "ILLEGAL_SASL_STATE", False),
    (35, "UNSUPPORTED_VERSION", False),
    (36, "TOPIC_ALREADY_EXISTS", False),
    (37, "INVALID_PARTITIONS", False),
    (38, "INVALID_REPLICATION_FACTOR", False),
    (39, "INVALID_REPLICA_ASSIGNMENT", False),
    (40, "INVALID_CONFIG", False),
    (41, "NOT_CONTROLLER", True),
    (42, "INVALID_REQUEST", False),
    (43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", False),
    (44, "POLICY_VIOLATION", False),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False),
    (46, "DUPLICATE_SEQUENCE_NUMBER", False),
    (47, "INVALID_PRODUCER_EPOCH", False),
    (48, "INVALID_TXN_STATE", False),
    (49, "INVALID_PRODUCER_ID_MAPPING", False),
    (50, "INVALID_TRANSACTION_TIMEOUT", False),
    (51, "CONCURRENT_TRANSACTIONS", True),
    (52, "TRANSACTION_COORDINATOR_FENCED", False),
    (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False),
    (54, "SECURITY_DISABLED", False),
    (55, "OPERATION_NOT_ATTEMPTED", False),
    (56, "KAFKA_STORAGE_ERROR", True),
    (57, "LOG_DIR_NOT_FOUND", False),
    (58, "SASL_AUTHENTICATION_FAILED", False),
    (59, "UNKNOWN_PRODUCER_ID", False),
    (67, "GROUP_SUBSCRIBED_TO_TOPIC", False),
    (68, "NON_EMPTY_GROUP", False),
    (69, "GROUP_ID_NOT_FOUND", False),
    (70, "FETCH_SESSION_ID_NOT_FOUND", True),
    (71, "INVALID_FETCH_SESSION_EPOCH", True),
    (72, "LISTENER_NOT_FOUND", True),
    (73, "TOPIC_DELETION_DISABLED", False),
    (74, "FENCED_LEADER_EPOCH", True),
    (75, "UNKNOWN_LEADER_EPOCH", True),
    (76, "UNSUPPORTED_COMPRESSION_TYPE", False),
    (77, "STALE_BROKER_EPOCH", False),
    (78, "OFFSET_NOT_AVAILABLE", True),
    (79, "MEMBER_ID_REQUIRED", False),
    (80, "PREFERRED_LEADER_NOT_AVAILABLE", True),
    (82, "FENCED_INSTANCE_ID", False),
    (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", True),
    (84, "ELECTION_NOT_NEEDED", True),
    (87, "INVALID_RECORD", False),
    (88, "UNSTABLE_OFFSET_COMMIT", True),
    (90, "PRODUCER_FENCED", False),
    (91, "RESOURCE_NOT_FOUND", False),
    (92, "DUPLICATE_RESOURCE", False),
    (93, "UNACCEPTABLE_CREDENTIAL", False),
    (100, "UNKNOWN_TOPIC_ID", True),
    (105, "TRANSACTIONAL_ID_NOT_FOUND", False),
    (115, "UNSUPPORTED_ENDPOINT_TYPE", False),
)

_BY_CODE: dict[int, type[KafkaError]] = {-1: KafkaError}
_BY_NAME: dict[str, type[KafkaError]] = {"UNKNOWN_SERVER_ERROR": KafkaError}


def _class_name(error_name: str) -> str:
    words = error_name.removesuffix("_EXCEPTION").split("_")
    return "".join(w.capitalize() for w in words) + "Error"


def _define(code: int, name: str, retriable: bool) -> type[KafkaError]:
    cls = type(
        _class_name(name),
        (KafkaError,),
        {"code": code, "error_name": name, "retriable": retriable, "__module__": __name__},
    )
    _BY_CODE[code] = cls
    _BY_NAME[name] = cls
    return cls


for _code, _name, _retriable in _ERROR_TABLE[1:]:
    _define(_code, _name, _retriable)


def error_for_code(code: int) -> type[KafkaError]:
    """The error class for a Kafka error code (UNKNOWN_SERVER_ERROR for unknown codes)."""
    return _BY_CODE.get(code, KafkaError)


def error_for_name(name: str) -> type[KafkaError]:
    """The error class for a Kafka error name such as ``NOT_LEADER_OR_FOLLOWER``."""
    return _BY_NAME[name]


# Named aliases so that callers (and mypy) can refer to the common ones directly.
OffsetOutOfRangeError = error_for_name("OFFSET_OUT_OF_RANGE")
CorruptRecordError = error_for_name("CORRUPT_MESSAGE")
UnknownTopicOrPartitionError = error_for_name("UNKNOWN_TOPIC_OR_PARTITION")
NotLeaderOrFollowerError = error_for_name("NOT_LEADER_OR_FOLLOWER")
RecordTooLargeError = error_for_name("MESSAGE_TOO_LARGE")
RecordListTooLargeError = error_for_name("RECORD_LIST_TOO_LARGE")
InvalidTimestampError = error_for_name("INVALID_TIMESTAMP")
InvalidConfigError = error_for_name("INVALID_CONFIG")
InvalidRequestError = error_for_name("INVALID_REQUEST")
KafkaStorageError = error_for_name("KAFKA_STORAGE_ERROR")
UnsupportedCompressionTypeError = error_for_name("UNSUPPORTED_COMPRESSION_TYPE")
UnsupportedForMessageFormatError = error_for_name("UNSUPPORTED_FOR_MESSAGE_FORMAT")
InvalidRecordError = error_for_name("INVALID_RECORD")
OutOfOrderSequenceNumberError = error_for_name("OUT_OF_ORDER_SEQUENCE_NUMBER")
DuplicateSequenceNumberError = error_for_name("DUPLICATE_SEQUENCE_NUMBER")
InvalidProducerEpochError = error_for_name("INVALID_PRODUCER_EPOCH")
NotEnoughReplicasError = error_for_name("NOT_ENOUGH_REPLICAS")
NotEnoughReplicasAfterAppendError = error_for_name("NOT_ENOUGH_REPLICAS_AFTER_APPEND")
RequestTimedOutError = error_for_name("REQUEST_TIMED_OUT")
FencedLeaderEpochError = error_for_name("FENCED_LEADER_EPOCH")
UnknownLeaderEpochError = error_for_name("UNKNOWN_LEADER_EPOCH")
StaleControllerEpochError = error_for_name("STALE_CONTROLLER_EPOCH")
NotControllerError = error_for_name("NOT_CONTROLLER")
LeaderNotAvailableError = error_for_name("LEADER_NOT_AVAILABLE")
ListenerNotFoundError = error_for_name("LISTENER_NOT_FOUND")
InvalidRequiredAcksError = error_for_name("INVALID_REQUIRED_ACKS")
InvalidTopicError = error_for_name("INVALID_TOPIC_EXCEPTION")
InvalidGroupIdError = error_for_name("INVALID_GROUP_ID")
TopicAlreadyExistsError = error_for_name("TOPIC_ALREADY_EXISTS")
ElectionNotNeededError = error_for_name("ELECTION_NOT_NEEDED")
CoordinatorNotAvailableError = error_for_name("COORDINATOR_NOT_AVAILABLE")
UnstableOffsetCommitError = error_for_name("UNSTABLE_OFFSET_COMMIT")
NetworkExceptionError = error_for_name("NETWORK_EXCEPTION")
InvalidTxnStateError = error_for_name("INVALID_TXN_STATE")
InvalidProducerIdMappingError = error_for_name("INVALID_PRODUCER_ID_MAPPING")
InvalidTransactionTimeoutError = error_for_name("INVALID_TRANSACTION_TIMEOUT")
ConcurrentTransactionsError = error_for_name("CONCURRENT_TRANSACTIONS")
TransactionCoordinatorFencedError = error_for_name("TRANSACTION_COORDINATOR_FENCED")
ProducerFencedError = error_for_name("PRODUCER_FENCED")
TransactionalIdNotFoundError = error_for_name("TRANSACTIONAL_ID_NOT_FOUND")


class StorageInternalError(KafkasimError):
    """A broken invariant inside the storage engine; never sent to a peer as such."""


class CorruptIndexError(StorageInternalError):
    """An index file failed its sanity check; the caller rebuilds it from the log."""


class InvalidOffsetError(StorageInternalError):
    """An append to an index or a log that is not in offset order."""


class InconsistentBrokerMetadataError(StorageInternalError):
    """The ``meta.properties`` files of a broker's log dirs disagree."""


class IllegalTxnTransitionError(KafkasimError):
    """A transaction state transition that Kafka's ``TransactionMetadata`` refuses (its
    ``IllegalStateException``): the coordinator asked for something its own checks should have
    answered with an error code first. Names the transactional id and both states."""
