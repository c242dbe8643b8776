"""kafkasim's wire contract: the generated messages and the method table.

``kafkasim.proto`` is the source of truth; ``kafkasim_pb2.py`` / ``.pyi`` are generated from it
by ``proto/generate.py`` (never edit them). This module adds what both transports need and the
generated code does not give without ``_grpc`` stubs:

* ``METHOD_*`` — the full gRPC method name of every rpc (``/kafkasim.<Service>/<Method>``),
  the keys of ``common.rpc.Transport`` handler maps and calls;
* ``METHODS`` — one :class:`MethodSpec` per rpc, read from the file descriptor, so the
  request/response classes and streaming flags can never disagree with the .proto;
* :class:`EncodedMessage` — a response a handler has already written in wire form (both
  transports send its bytes as they are).

Invariant: ``METHODS`` has exactly one entry per ``METHOD_*`` constant
(``tests/unit/proto/test_generated.py`` checks every rpc of the .proto has a constant).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass

from kafkasim.proto import kafkasim_pb2

# Kafkasim: the client-facing API.
METHOD_METADATA = "/kafkasim.Kafkasim/Metadata"
METHOD_PRODUCE = "/kafkasim.Kafkasim/Produce"
METHOD_PRODUCE_STREAM = "/kafkasim.Kafkasim/ProduceStream"
METHOD_FETCH = "/kafkasim.Kafkasim/Fetch"
METHOD_LIST_OFFSETS = "/kafkasim.Kafkasim/ListOffsets"
METHOD_CREATE_TOPICS = "/kafkasim.Kafkasim/CreateTopics"
METHOD_DELETE_TOPICS = "/kafkasim.Kafkasim/DeleteTopics"
METHOD_CREATE_PARTITIONS = "/kafkasim.Kafkasim/CreatePartitions"
METHOD_DESCRIBE_CLUSTER = "/kafkasim.Kafkasim/DescribeCluster"
METHOD_DESCRIBE_CONFIGS = "/kafkasim.Kafkasim/DescribeConfigs"
METHOD_ELECT_LEADERS = "/kafkasim.Kafkasim/ElectLeaders"
METHOD_INIT_PRODUCER_ID = "/kafkasim.Kafkasim/InitProducerId"
METHOD_DESCRIBE_REPLICAS = "/kafkasim.Kafkasim/DescribeReplicas"
METHOD_DELETE_RECORDS = "/kafkasim.Kafkasim/DeleteRecords"
METHOD_INCREMENTAL_ALTER_CONFIGS = "/kafkasim.Kafkasim/IncrementalAlterConfigs"
METHOD_FIND_COORDINATOR = "/kafkasim.Kafkasim/FindCoordinator"
METHOD_JOIN_GROUP = "/kafkasim.Kafkasim/JoinGroup"
METHOD_SYNC_GROUP = "/kafkasim.Kafkasim/SyncGroup"
METHOD_HEARTBEAT = "/kafkasim.Kafkasim/Heartbeat"
METHOD_LEAVE_GROUP = "/kafkasim.Kafkasim/LeaveGroup"
METHOD_OFFSET_COMMIT = "/kafkasim.Kafkasim/OffsetCommit"
METHOD_OFFSET_FETCH = "/kafkasim.Kafkasim/OffsetFetch"
METHOD_LIST_GROUPS = "/kafkasim.Kafkasim/ListGroups"
METHOD_DESCRIBE_GROUPS = "/kafkasim.Kafkasim/DescribeGroups"
METHOD_DELETE_GROUPS = "/kafkasim.Kafkasim/DeleteGroups"
METHOD_ADD_PARTITIONS_TO_TXN = "/kafkasim.Kafkasim/AddPartitionsToTxn"
METHOD_ADD_OFFSETS_TO_TXN = "/kafkasim.Kafkasim/AddOffsetsToTxn"
METHOD_END_TXN = "/kafkasim.Kafkasim/EndTxn"
METHOD_TXN_OFFSET_COMMIT = "/kafkasim.Kafkasim/TxnOffsetCommit"
METHOD_DESCRIBE_TRANSACTIONS = "/kafkasim.Kafkasim/DescribeTransactions"
METHOD_LIST_TRANSACTIONS = "/kafkasim.Kafkasim/ListTransactions"
METHOD_DESCRIBE_PRODUCERS = "/kafkasim.Kafkasim/DescribeProducers"
METHOD_OFFSET_DELETE = "/kafkasim.Kafkasim/OffsetDelete"

# Replication: follower <-> leader, and the transaction coordinator -> partition leaders.
METHOD_REPLICA_FETCH = "/kafkasim.Replication/ReplicaFetch"
METHOD_OFFSETS_FOR_LEADER_EPOCH = "/kafkasim.Replication/OffsetsForLeaderEpoch"
METHOD_WRITE_TXN_MARKERS = "/kafkasim.Replication/WriteTxnMarkers"

# Controller: controller -> broker, and ControlledShutdown broker -> controller.
METHOD_LEADER_AND_ISR = "/kafkasim.Controller/LeaderAndIsr"
METHOD_UPDATE_METADATA = "/kafkasim.Controller/UpdateMetadata"
METHOD_STOP_REPLICA = "/kafkasim.Controller/StopReplica"
METHOD_CONTROLLED_SHUTDOWN = "/kafkasim.Controller/ControlledShutdown"


# The fields a fetch answer's records travel in, for the hand-written codec of that answer
# (node.apis_replica writes it, node.fetcher_wire reads it): read from the descriptor, so
# both sides follow the .proto together.
FETCH_PARTITIONS_FIELD = kafkasim_pb2.FetchResponse.DESCRIPTOR.fields_by_name["partitions"].number
FETCH_RECORDS_FIELD = kafkasim_pb2.FetchPartitionResponse.DESCRIPTOR.fields_by_name[
    "records"
].number


class EncodedMessage:
    """A message already in its wire form, ``data`` the bytes ``encodes.FromString`` parses:
    what a handler may answer instead of building the message, where building it would copy
    large bytes (a fetch answer's records). gRPC and SimNetwork send ``SerializeToString()``
    (the bytes themselves, no copy) as they send a message's; the framed transport its
    ``pieces()``."""

    __slots__ = ("_data", "_pieces", "encodes")

    def __init__(
        self, encodes: type[Message], data: bytes = b"", *, pieces: Sequence[bytes] = ()
    ) -> None:
        """The wire form as ``data``, or as ``pieces`` whose concatenation it is (joined only
        for a transport that needs one buffer: gRPC and SimNetwork do; the framed replication
        transport writes the large pieces as they are)."""
        self.encodes = encodes
        self._data: bytes | None = None if pieces else data
        self._pieces = tuple(pieces)

    @property
    def data(self) -> bytes:
        if self._data is None:
            self._data = b"".join(self._pieces)
            self._pieces = ()
        return self._data

    def pieces(self) -> Sequence[bytes]:
        """The wire form in pieces, without joining them."""
        return self._pieces if self._data is None else (self._data,)

    def SerializeToString(self) -> bytes:  # noqa: N802 -- protobuf's name, for the transports
        return self.data


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """One rpc of the contract, as both transports need it.

    ``name`` is the full method name (``/package.Service/Method``); ``request_cls`` and
    ``response_cls`` are the generated message classes used to (de)serialize.
    """

    name: str
    request_cls: type[Message]
    response_cls: type[Message]
    client_streaming: bool
    server_streaming: bool

    @property
    def service(self) -> str:
        """``package.Service`` (what gRPC's generic handlers are keyed by)."""
        return self.name.split("/")[1]

    @property
    def short_name(self) -> str:
        """The bare method name (``Produce``)."""
        return self.name.split("/")[2]

    @property
    def is_unary(self) -> bool:
        return not self.client_streaming and not self.server_streaming

    @property
    def is_bidi_stream(self) -> bool:
        return self.client_streaming and self.server_streaming

    def check_request(self, message: Message) -> None:
        """Sending the wrong message type is the caller's bug, not a transport fault."""
        if not isinstance(message, self.request_cls):
            raise TypeError(
                f"{self.name} takes {self.request_cls.__name__}, got {type(message).__name__}"
            )

    def check_response(self, message: object) -> Message | EncodedMessage:
        """A handler answering with the wrong type is a bug in the handler (an
        :class:`EncodedMessage` must encode the method's response type)."""
        if isinstance(message, self.response_cls):
            return message
        if isinstance(message, EncodedMessage) and message.encodes is self.response_cls:
            return message
        what = type(message).__name__
        if isinstance(message, EncodedMessage):
            what = f"{what} encoding {message.encodes.__name__}"
        raise TypeError(
            f"handler for {self.name} must answer {self.response_cls.__name__}, got {what}"
        )


def _method_table() -> dict[str, MethodSpec]:
    table: dict[str, MethodSpec] = {}
    for service in kafkasim_pb2.DESCRIPTOR.services_by_name.values():
        for method in service.methods:
            name = f"/{service.full_name}/{method.name}"
            table[name] = MethodSpec(
                name=name,
                request_cls=GetMessageClass(method.input_type),
                response_cls=GetMessageClass(method.output_type),
                client_streaming=method.client_streaming,
                server_streaming=method.server_streaming,
            )
    return table


METHODS: MappingProxyType[str, MethodSpec] = MappingProxyType(_method_table())
"""Every rpc of ``kafkasim.proto`` keyed by full method name (read-only)."""


def method_spec(name: str, *, streaming: bool) -> MethodSpec | None:
    """The unary (or, with ``streaming``, bidirectional-stream) rpc called ``name``.

    ``None`` when the contract has no such rpc of that kind: transports answer UNIMPLEMENTED.
    """
    spec = METHODS.get(name)
    if spec is None or not (spec.is_bidi_stream if streaming else spec.is_unary):
        return None
    return spec


def check_servable(unary: Iterable[str], streams: Iterable[str]) -> None:
    """Every unary handler key is a unary rpc, every stream key a bidi rpc (``ValueError``)."""
    for names, streaming in ((unary, False), (streams, True)):
        for name in names:
            if method_spec(name, streaming=streaming) is None:
                kind = "bidirectional-stream" if streaming else "unary"
                raise ValueError(f"cannot serve {name!r}: not a {kind} rpc of kafkasim.proto")


__all__ = [
    "FETCH_PARTITIONS_FIELD",
    "FETCH_RECORDS_FIELD",
    "METHODS",
    "METHOD_ADD_OFFSETS_TO_TXN",
    "METHOD_ADD_PARTITIONS_TO_TXN",
    "METHOD_CONTROLLED_SHUTDOWN",
    "METHOD_CREATE_PARTITIONS",
    "METHOD_CREATE_TOPICS",
    "METHOD_DELETE_GROUPS",
    "METHOD_DELETE_RECORDS",
    "METHOD_DELETE_TOPICS",
    "METHOD_DESCRIBE_CLUSTER",
    "METHOD_DESCRIBE_CONFIGS",
    "METHOD_DESCRIBE_GROUPS",
    "METHOD_DESCRIBE_PRODUCERS",
    "METHOD_DESCRIBE_REPLICAS",
    "METHOD_DESCRIBE_TRANSACTIONS",
    "METHOD_ELECT_LEADERS",
    "METHOD_END_TXN",
    "METHOD_FETCH",
    "METHOD_FIND_COORDINATOR",
    "METHOD_HEARTBEAT",
    "METHOD_INCREMENTAL_ALTER_CONFIGS",
    "METHOD_INIT_PRODUCER_ID",
    "METHOD_JOIN_GROUP",
    "METHOD_LEADER_AND_ISR",
    "METHOD_LEAVE_GROUP",
    "METHOD_LIST_GROUPS",
    "METHOD_LIST_OFFSETS",
    "METHOD_LIST_TRANSACTIONS",
    "METHOD_METADATA",
    "METHOD_OFFSETS_FOR_LEADER_EPOCH",
    "METHOD_OFFSET_COMMIT",
    "METHOD_OFFSET_DELETE",
    "METHOD_OFFSET_FETCH",
    "METHOD_PRODUCE",
    "METHOD_PRODUCE_STREAM",
    "METHOD_REPLICA_FETCH",
    "METHOD_STOP_REPLICA",
    "METHOD_SYNC_GROUP",
    "METHOD_TXN_OFFSET_COMMIT",
    "METHOD_UPDATE_METADATA",
    "METHOD_WRITE_TXN_MARKERS",
    "EncodedMessage",
    "MethodSpec",
    "check_servable",
    "kafkasim_pb2",
    "method_spec",
]
