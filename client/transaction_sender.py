"""The sender's transactional half: it drives :class:`~client.transaction_manager.
TransactionManager`'s queue over kafkasim's gRPC contract (Kafka 3.7's
``Sender.maybeSendAndPollTransactionalRequest``).

Each round of the sender loop asks :meth:`TransactionalSender.maybe_send` first. While a
transactional request is in flight nothing else leaves (Kafka sends no produce data then
either); otherwise the manager's next request goes to the coordinator it names — the
transaction coordinator for InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn,
the group coordinator for TxnOffsetCommit, any broker for FindCoordinator — after its retry
backoff, and its answer (or the broken call) goes back to the manager. A coordinator not
known yet is looked up first (FindCoordinator key_type 1, or 0 for the group).

Design decisions:

* The wire is translated here and only here: the manager's requests and responses are
  wire-free values (:mod:`client.transaction_types`), each mapped to its ``pb`` message.
* kafkasim's gRPC InitProducerId always carries the producer id and epoch (KIP-360), so the
  coordinator is declared able to bump epochs (Kafka learns it from ApiVersions: v3+).
* A transport failure is Kafka's disconnect: the coordinator is looked up again and the
  request retried (``handle_disconnect``); a FindCoordinator no broker answered is retried
  after ``retry.backoff.ms``.
* :attr:`TransactionalSender.progress` is set whenever a request's answer was handled or the
  queue moved without one (an empty transaction ends locally, queued requests fail in an
  error state): the producer's transactional calls wait on it for their result.

Not thread-safe: the producer's event loop owns it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from google.protobuf.message import Message

from kafkasim import proto
from kafkasim.client.producer_errors import (
    IllegalTransactionStateError,
    TransactionError,
    log_task_error,
    logger,
)
from kafkasim.client.transaction_manager import TransactionManager
from kafkasim.client.transaction_types import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnRequest,
    TxnRequestBody,
    TxnResponseBody,
)
from kafkasim.common.rpc import ClientTransport, RpcError
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb

__all__ = ["TransactionalSender", "from_proto", "to_proto"]

# The InitProducerId version whose semantics kafkasim's contract has (producer id and epoch
# in the request: KIP-360's epoch bump).
GRPC_INIT_PRODUCER_ID_VERSION = 4


def to_proto(body: TxnRequestBody) -> tuple[str, Message]:
    """The rpc and the message that carry ``body``."""
    match body:
        case FindCoordinatorRequest():
            return proto.METHOD_FIND_COORDINATOR, pb.FindCoordinatorRequest(
                key=body.key, key_type=int(body.key_type)
            )
        case InitProducerIdRequest():
            return proto.METHOD_INIT_PRODUCER_ID, pb.InitProducerIdRequest(
                transactional_id=body.transactional_id,
                transaction_timeout_ms=body.transaction_timeout_ms,
                has_producer_id=body.producer_id >= 0,
                producer_id=body.producer_id,
                producer_epoch=body.producer_epoch,
            )
        case AddPartitionsToTxnRequest():
            return proto.METHOD_ADD_PARTITIONS_TO_TXN, pb.AddPartitionsToTxnRequest(
                transactional_id=body.transactional_id,
                producer_id=body.producer_id,
                producer_epoch=body.producer_epoch,
                partitions=[
                    pb.TopicPartitionId(topic=tp.topic, partition=tp.partition)
                    for tp in body.partitions
                ],
            )
        case AddOffsetsToTxnRequest():
            return proto.METHOD_ADD_OFFSETS_TO_TXN, pb.AddOffsetsToTxnRequest(
                transactional_id=body.transactional_id,
                producer_id=body.producer_id,
                producer_epoch=body.producer_epoch,
                group_id=body.group_id,
            )
        case TxnOffsetCommitRequest():
            return proto.METHOD_TXN_OFFSET_COMMIT, pb.TxnOffsetCommitRequest(
                transactional_id=body.transactional_id,
                group_id=body.group_id,
                producer_id=body.producer_id,
                producer_epoch=body.producer_epoch,
                generation_id=body.generation_id,
                member_id=body.member_id,
                group_instance_id=body.group_instance_id or "",
                partitions=[
                    pb.OffsetCommitPartition(
                        topic=tp.topic,
                        partition=tp.partition,
                        committed_offset=offset.offset,
                        committed_leader_epoch=offset.leader_epoch,
                        committed_metadata=offset.metadata,
                    )
                    for tp, offset in body.offsets
                ],
            )
        case EndTxnRequest():
            return proto.METHOD_END_TXN, pb.EndTxnRequest(
                transactional_id=body.transactional_id,
                producer_id=body.producer_id,
                producer_epoch=body.producer_epoch,
                committed=body.committed,
            )
    raise TypeError(f"not a transactional request: {body!r}")  # pragma: no cover


def _partition_errors(
    partitions: object,
) -> dict[TopicPartition, int]:
    return {
        TopicPartition(p.topic, p.partition): p.error_code
        for p in partitions  # type: ignore[attr-defined]
    }


def from_proto(message: Message) -> TxnResponseBody:
    """The manager's value for an answer of the contract (TypeError for anything else)."""
    match message:
        case pb.FindCoordinatorResponse():
            return FindCoordinatorResponse(
                error_code=message.error_code,
                node_id=message.node_id,
                host=message.host,
                port=message.port,
                error_message=message.error_message,
            )
        case pb.InitProducerIdResponse():
            return InitProducerIdResponse(
                error_code=message.error_code,
                producer_id=message.producer_id,
                producer_epoch=message.producer_epoch,
            )
        case pb.AddPartitionsToTxnResponse():
            return AddPartitionsToTxnResponse(_partition_errors(message.partitions))
        case pb.AddOffsetsToTxnResponse():
            return AddOffsetsToTxnResponse(error_code=message.error_code)
        case pb.TxnOffsetCommitResponse():
            return TxnOffsetCommitResponse(_partition_errors(message.partitions))
        case pb.EndTxnResponse():
            return EndTxnResponse(error_code=message.error_code)
    raise TypeError(f"not a transactional response: {type(message).__name__}")


class TransactionalSender:
    """Sends the manager's requests, one at a time (see the module docstring).

    ``call_any_broker`` sends a unary call to the first broker that answers (the producer's
    metadata refresher has it); ``wake`` wakes the sender loop once an answer was handled.
    """

    def __init__(
        self,
        manager: TransactionManager,
        *,
        transport: ClientTransport,
        call_any_broker: Callable[[str, Message], Awaitable[Message]],
        request_timeout_ms: int,
        wake: Callable[[], None],
        client_id: str,
    ) -> None:
        self.manager = manager
        self._transport = transport
        self._call_any_broker = call_any_broker
        self._timeout_s = request_timeout_ms / 1000
        self._wake = wake
        self._client_id = client_id
        self.progress = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.requests_sent = 0
        manager.coordinator_ready(GRPC_INIT_PRODUCER_ID_VERSION)

    def maybe_send(self, *, has_incomplete_batches: bool) -> bool:
        """Send the next transactional request if there is one; True while one is in flight
        or was just sent (the sender then sends no produce data this round)."""
        manager = self.manager
        if manager.has_in_flight_request:
            return True
        had_requests = manager.has_pending_requests
        request = manager.next_request(has_incomplete_batches=has_incomplete_batches)
        self.progress.set()  # the queue may have moved (a local end, failed requests)
        if request is None:
            if had_requests and not manager.has_pending_requests:
                self._wake()  # ended locally: the loop looks again (a close may finish)
            return False
        address: str | None = None
        if request.coordinator_type is not None:
            node = manager.coordinator(request.coordinator_type)
            if node is None:
                manager.retry_after_coordinator_lookup(request)
                self._wake()
                return True
            address = f"{node.host}:{node.port}"
        manager.request_sent(request)
        self.requests_sent += 1
        self.task = asyncio.get_running_loop().create_task(
            self._send(request, address), name=f"{self._client_id}-txn-request"
        )
        self.task.add_done_callback(log_task_error)
        return True

    def may_close(self, forced: bool) -> bool:
        """May the closing producer's sender stop? Not while requests are queued or in
        flight; an open transaction is aborted first (Kafka's Sender.run on shutdown)."""
        manager = self.manager
        if forced or manager.has_fatal_error:
            return True
        if manager.has_ongoing_transaction and not manager.is_completing:
            logger.info("%s: aborting the open transaction on close", self._client_id)
            try:
                manager.abort_transaction()
            except (IllegalTransactionStateError, TransactionError):
                return True  # a call must be retried first: nothing more to send
            self._wake()
        return not (manager.has_pending_requests or manager.has_in_flight_request)

    async def _send(self, request: TxnRequest, address: str | None) -> None:
        if request.send_delay_ms:
            await asyncio.sleep(request.send_delay_ms / 1000)
        method, message = to_proto(request.body)
        try:
            if address is None:
                answer = await self._call_any_broker(method, message)
            else:
                answer = await self._transport.call(
                    address, method, message, timeout_s=self._timeout_s
                )
        except RpcError as e:
            logger.info(
                "%s: %s to %s failed: %s", self._client_id, type(request.body).__name__, address, e
            )
            self.manager.handle_disconnect(request)
        else:
            assert isinstance(answer, Message)
            self.manager.handle_response(request, from_proto(answer))
        finally:
            self.progress.set()
            self._wake()
