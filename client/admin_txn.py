"""The admin client's transaction calls (part of :class:`client.admin.AdminClient`), as
Kafka's ``Admin.describeProducers`` / ``listTransactions`` / ``describeTransactions`` route
them (the handlers of KIP-664):

* ``describe_producers``: each partition's leader (found in the metadata), or the one broker
  asked for (``broker_id``: any replica answers). NOT_LEADER_OR_FOLLOWER and the other
  stale-metadata errors are retried after a metadata refresh when the leader was asked, not
  when a broker was named (its answer is the answer);
* ``list_transactions``: every live broker (each knows only the transactional ids it
  coordinates), the answers kept per broker id; COORDINATOR_LOAD_IN_PROGRESS is retried;
* ``describe_transactions``: each id's transaction coordinator (FindCoordinator key_type 1);
  NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE look it up again, COORDINATOR_LOAD_IN_PROGRESS
  retries; TRANSACTIONAL_ID_NOT_FOUND and anything else raise the Kafka error class naming the
  id.

Retries follow the admin client's policy (``NetworkClient.retrying``: until its timeout on its
clock).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kafkasim import proto
from kafkasim.client.consumer_group import find_coordinator
from kafkasim.client.network import INVALID_METADATA_CODES, NetworkClient
from kafkasim.common.errors import (
    CoordinatorNotAvailableError,
    KafkaError,
    TransactionalIdNotFoundError,
    UnknownTopicOrPartitionError,
    error_for_code,
    error_for_name,
)
from kafkasim.common.rpc import RpcError
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb

TRANSACTION_COORDINATOR = 1  # FindCoordinator key_type (Kafka's CoordinatorType.TRANSACTION)
_RELOOKUP = frozenset({error_for_name("NOT_COORDINATOR").code, CoordinatorNotAvailableError.code})


@dataclass(frozen=True, slots=True)
class ProducerState:
    """One producer a partition's replica remembers (Kafka's ``ProducerState``)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int | None  # None: no marker written for it yet
    current_transaction_start_offset: int | None  # None: no open transaction


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str  # Kafka's names: Empty, Ongoing, PrepareCommit, CompleteCommit, ...


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None  # None: no transaction open
    topic_partitions: tuple[TopicPartition, ...]


class TransactionAdmin:
    """Mixed into ``AdminClient``, which provides ``_client``."""

    _client: NetworkClient

    # -- DescribeProducers ------------------------------------------------------------------

    async def describe_producers(
        self, partitions: Sequence[TopicPartition], *, broker_id: int | None = None
    ) -> dict[TopicPartition, list[ProducerState]]:
        """The active producers of each partition on its leader (or on ``broker_id``); a
        failed partition raises its Kafka error class naming it."""
        out: dict[TopicPartition, list[ProducerState]] = {}
        for tp in partitions:
            if broker_id is not None:
                out[tp] = await self._describe_producers_on(tp, broker_id)
                continue
            async for attempt in self._client.retrying(retry_on=_stale_leader):
                with attempt:
                    out[tp] = await self._describe_producers_on(tp, None)
        return out

    async def _describe_producers_on(
        self, tp: TopicPartition, broker_id: int | None
    ) -> list[ProducerState]:
        await self._client.refresh_metadata([tp.topic])
        if broker_id is None:
            if not self._client.metadata.has_partition(tp):
                raise UnknownTopicOrPartitionError(f"Partition {tp} does not exist.")
            address = await self._client.leader_address(tp)
        else:
            known = self._client.metadata.brokers.get(broker_id)
            if known is None:
                raise error_for_code(_BROKER_NOT_AVAILABLE)(
                    f"broker {broker_id} is not a live broker of the cluster"
                )
            address = known
        request = pb.DescribeProducersRequest()
        request.partitions.add(topic=tp.topic, partition=tp.partition)
        response = await self._client.transport.call(
            address, proto.METHOD_DESCRIBE_PRODUCERS, request, timeout_s=self._client.timeout_s
        )
        assert isinstance(response, pb.DescribeProducersResponse)
        for result in response.partitions:
            if (result.topic, result.partition) != (tp.topic, tp.partition):
                continue
            if result.error_code:
                message = result.error_message or f"partition {tp}"
                if str(tp) not in message:
                    message = f"partition {tp}: {message}"
                raise error_for_code(result.error_code)(message)
            return [
                ProducerState(
                    p.producer_id,
                    p.producer_epoch,
                    p.last_sequence,
                    p.last_timestamp,
                    p.coordinator_epoch if p.coordinator_epoch >= 0 else None,
                    p.current_txn_start_offset if p.current_txn_start_offset >= 0 else None,
                )
                for p in result.active_producers
            ]
        raise error_for_code(_UNKNOWN_SERVER_ERROR)(f"no answer for partition {tp}")

    # -- ListTransactions -------------------------------------------------------------------

    async def list_transactions(
        self,
        *,
        state_filters: Iterable[str] = (),
        producer_id_filters: Iterable[int] = (),
    ) -> dict[int, list[TransactionListing]]:
        """Every transactional id each live broker coordinates, by broker id (sorted)."""
        response = await self._client.call_any(
            proto.METHOD_DESCRIBE_CLUSTER, pb.DescribeClusterRequest()
        )
        assert isinstance(response, pb.DescribeClusterResponse)
        request = pb.ListTransactionsRequest(
            state_filters=list(state_filters), producer_id_filters=list(producer_id_filters)
        )
        out: dict[int, list[TransactionListing]] = {}
        for broker in sorted(response.brokers, key=lambda b: b.node_id):
            answer = await self._list_on(broker.node_id, f"{broker.host}:{broker.port}", request)
            out[broker.node_id] = sorted(
                (
                    TransactionListing(t.transactional_id, t.producer_id, t.transaction_state)
                    for t in answer.transactions
                ),
                key=lambda t: t.transactional_id,
            )
        return out

    async def _list_on(
        self, broker_id: int, address: str, request: pb.ListTransactionsRequest
    ) -> pb.ListTransactionsResponse:
        async for attempt in self._client.retrying(retry_on=_load_in_progress_or_rpc):
            with attempt:
                answer = await self._client.transport.call(
                    address,
                    proto.METHOD_LIST_TRANSACTIONS,
                    request,
                    timeout_s=self._client.timeout_s,
                )
                assert isinstance(answer, pb.ListTransactionsResponse)
                if answer.error_code:
                    raise error_for_code(answer.error_code)(
                        f"Failed to list transactions for broker {broker_id}"
                    )
                return answer
        raise AssertionError("unreachable")  # pragma: no cover

    # -- DescribeTransactions ---------------------------------------------------------------

    async def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> list[TransactionDescription]:
        """Each id's transaction as its coordinator knows it; an id it does not know raises
        TRANSACTIONAL_ID_NOT_FOUND naming it."""
        return [await self._describe_one(t) for t in transactional_ids]

    async def _describe_one(self, transactional_id: str) -> TransactionDescription:
        async for attempt in self._client.retrying(retry_on=_coordinator_moved):
            with attempt:
                coordinator, address = await find_coordinator(
                    self._client, transactional_id, key_type=TRANSACTION_COORDINATOR
                )
                response = await self._client.transport.call(
                    address,
                    proto.METHOD_DESCRIBE_TRANSACTIONS,
                    pb.DescribeTransactionsRequest(transactional_ids=[transactional_id]),
                    timeout_s=self._client.timeout_s,
                )
                assert isinstance(response, pb.DescribeTransactionsResponse)
                found = [t for t in response.transactions if t.transactional_id == transactional_id]
                if not found:
                    raise error_for_code(_UNKNOWN_SERVER_ERROR)(
                        f"no description of transactional id {transactional_id} in the answer"
                    )
                t = found[0]
                if t.error_code:
                    # Kafka's DescribeTransactionsHandler: "TransactionalId X not found".
                    suffix = " not found" if t.error_code == _TXN_ID_NOT_FOUND else ""
                    raise error_for_code(t.error_code)(
                        f"TransactionalId {transactional_id}{suffix}"
                    )
                return TransactionDescription(
                    coordinator,
                    t.transaction_state,
                    t.producer_id,
                    t.producer_epoch,
                    t.transaction_timeout_ms,
                    t.transaction_start_time_ms if t.transaction_start_time_ms >= 0 else None,
                    tuple(TopicPartition(p.topic, p.partition) for p in t.partitions),
                )
        raise AssertionError("unreachable")  # pragma: no cover


_LOAD_IN_PROGRESS = error_for_name("COORDINATOR_LOAD_IN_PROGRESS").code
_TXN_ID_NOT_FOUND = TransactionalIdNotFoundError.code
_BROKER_NOT_AVAILABLE = error_for_name("BROKER_NOT_AVAILABLE").code
_UNKNOWN_SERVER_ERROR = -1


def _stale_leader(e: BaseException) -> bool:
    """DescribeProducers to the leader: ask again when it moved (or did not answer)."""
    if isinstance(e, RpcError):
        return True
    return isinstance(e, KafkaError) and e.code in INVALID_METADATA_CODES


def _coordinator_moved(e: BaseException) -> bool:
    """DescribeTransactions: look the coordinator up again, or wait for it to load."""
    if isinstance(e, RpcError):
        return True
    return isinstance(e, KafkaError) and (e.code in _RELOOKUP or e.code == _LOAD_IN_PROGRESS)


def _load_in_progress_or_rpc(e: BaseException) -> bool:
    """ListTransactions: only COORDINATOR_LOAD_IN_PROGRESS is retried (and no answer)."""
    if isinstance(e, RpcError):
        return True
    return isinstance(e, KafkaError) and e.code == _LOAD_IN_PROGRESS
