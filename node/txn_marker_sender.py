"""The transaction coordinator's WriteTxnMarkers sender over the inter-broker transport
(``node.txn_markers.MarkerSender``): one WriteTxnMarkers call to the partitions' leader, at its
inter-broker address, answered per partition. The leader may be this broker: the call goes
through the transport all the same (as Kafka's coordinator sends to itself through its
channel), so one path is tested. A failure of the whole call (leader unreachable, deadline)
raises :class:`~common.rpc.RpcError`, which the coordinator retries next round.

:func:`rpc_marker_sender` is every broker's sender unless told otherwise (``node.broker``):
the broker's own transport and metadata cache, with the broker's ``request.timeout.ms`` as
each call's deadline (Kafka's ``TransactionMarkerChannelManager`` sends with it too)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from kafkasim import proto
from kafkasim.common.errors import error_for_code
from kafkasim.common.rpc import ClientTransport, RpcError, RpcStatus
from kafkasim.common.types import TopicPartition
from kafkasim.node.config import BrokerConfig
from kafkasim.node.group_types import Error
from kafkasim.node.metadata_cache import MetadataCache
from kafkasim.node.txn_markers import TxnMarkerEntry
from kafkasim.node.txn_types import TransactionResult
from kafkasim.proto import kafkasim_pb2 as pb


class RpcMarkerSender:
    """``MarkerSender`` calling ``address_of(leader_id)`` through ``transport``."""

    def __init__(
        self,
        transport: ClientTransport,
        address_of: Callable[[int], str | None],
        timeout_s: float,
    ) -> None:
        self._transport = transport
        self._address_of = address_of
        self._timeout_s = timeout_s

    async def __call__(
        self, leader_id: int, marker: TxnMarkerEntry
    ) -> Mapping[TopicPartition, Error]:
        address = self._address_of(leader_id)
        if address is None:
            raise RpcError(RpcStatus.UNAVAILABLE, f"broker {leader_id} is not live")
        response = await self._transport.call(
            address,
            proto.METHOD_WRITE_TXN_MARKERS,
            write_txn_markers_request(marker),
            timeout_s=self._timeout_s,
        )
        assert isinstance(response, pb.WriteTxnMarkersResponse)
        return marker_errors(marker, response)


class MarkerSenderPorts(Protocol):
    """What :func:`rpc_marker_sender` reads of its broker (``node.broker.Broker`` has it)."""

    config: BrokerConfig
    metadata: MetadataCache

    @property
    def transport(self) -> ClientTransport: ...


def rpc_marker_sender(broker: MarkerSenderPorts) -> RpcMarkerSender:
    """The broker's sender over its inter-broker transport (see the module doc)."""
    timeout_ms: int = broker.config["request.timeout.ms"]
    return RpcMarkerSender(broker.transport, broker.metadata.address_of, timeout_ms / 1000)


def write_txn_markers_request(marker: TxnMarkerEntry) -> pb.WriteTxnMarkersRequest:
    topics: dict[str, list[int]] = {}
    for tp in sorted(marker.partitions):
        topics.setdefault(tp.topic, []).append(tp.partition)
    return pb.WriteTxnMarkersRequest(
        markers=[
            pb.WritableTxnMarker(
                producer_id=marker.producer_id,
                producer_epoch=marker.producer_epoch,
                transaction_result=marker.result is TransactionResult.COMMIT,
                coordinator_epoch=marker.coordinator_epoch,
                topics=[
                    pb.WritableTxnMarkerTopic(name=name, partition_indexes=parts)
                    for name, parts in topics.items()
                ],
            )
        ]
    )


def marker_errors(
    marker: TxnMarkerEntry, response: pb.WriteTxnMarkersResponse
) -> dict[TopicPartition, Error]:
    """The error of each of ``marker``'s partitions in ``response`` (a partition the answer
    does not name: UNKNOWN_SERVER_ERROR, so that the coordinator does not take it as written)."""
    answered: dict[TopicPartition, Error] = {}
    for result in response.markers:
        if result.producer_id != marker.producer_id:
            continue
        for part in result.partitions:
            tp = TopicPartition(part.topic, part.partition)
            answered[tp] = error_for_code(part.error_code) if part.error_code else None
    return {tp: answered.get(tp, error_for_code(-1)) for tp in marker.partitions}
