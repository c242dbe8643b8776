"""A transaction past ``transaction.timeout.ms``, end to end with kafkasim's transactional
``Producer`` (Kafka 2.x-3.x, before KIP-890):

* the coordinator's timer aborts it at a bumped epoch (``abortTimedOutTransactions``:
  ``prepareFenceProducerEpoch``, then EndTxn(ABORT) from the coordinator itself);
* the stalled producer's late send is refused INVALID_PRODUCER_EPOCH by the partition leader
  (abortable since KIP-588), its abort's EndTxn with the old epoch PRODUCER_FENCED, which
  Kafka's ``TransactionManager`` makes fatal: the producer is done;
* a new producer with the same transactional id gets CONCURRENT_TRANSACTIONS from
  InitProducerId while the abort's markers are being written, retries after
  ``retry.backoff.ms``, then gets the epoch after the fence (the fenced epoch + 1), and its
  transactions commit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from kafkasim.client.producer import Producer
from kafkasim.common.errors import InvalidProducerEpochError, ProducerFencedError
from kafkasim.common.types import TopicPartition
from kafkasim.node.broker import Broker
from kafkasim.node.group_types import Error
from kafkasim.node.txn_coordinator import TransactionCoordinator
from kafkasim.node.txn_marker_sender import rpc_marker_sender
from kafkasim.node.txn_markers import MarkerSender, TxnMarkerEntry
from kafkasim.node.txn_metadata import TransactionMetadata, TransactionState
from kafkasim.node.txn_types import InitProducerIdParams, InitProducerIdResult, TransactionResult
from kafkasim.sim.cluster import SimCluster
from tests.sim.helpers import create, simulate
from tests.sim.test_producer import producing
from tests.sim.test_transactional_producer import READ_COMMITTED, values_seen
from tests.sim.test_txn_coordinator import SETTINGS

TOPIC = "orders"
TID = "stalling"
TIMEOUT_MS = 1000
CHECK_INTERVAL_MS = 200
CONFIG = {
    **SETTINGS,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": CHECK_INTERVAL_MS,
}
S = TransactionState


def metadata_of(cluster: SimCluster) -> TransactionMetadata | None:
    for txns in coordinators(cluster):
        if txns.manager.check(TID) is None:
            return txns.manager.metadata(TID)
    return None


def coordinators(cluster: SimCluster) -> list[TransactionCoordinator]:
    return [b.transactions for _, b in sorted(cluster.brokers.items()) if b.transactions]


def in_state(cluster: SimCluster, state: TransactionState) -> bool:
    metadata = metadata_of(cluster)
    return metadata is not None and metadata.state is state


def record_init_answers(cluster: SimCluster) -> list[InitProducerIdResult]:
    """Every InitProducerId answer of every coordinator, in order."""
    answers: list[InitProducerIdResult] = []
    for txns in coordinators(cluster):
        original = txns.init_producer_id

        async def init(
            params: InitProducerIdParams,
            original: object = original,
        ) -> InitProducerIdResult:
            assert callable(original)
            result = await original(params)
            assert isinstance(result, InitProducerIdResult)
            answers.append(result)
            return result

        txns.init_producer_id = init  # type: ignore[method-assign]
    return answers


class AbortGate:
    """The brokers' real marker sender, ABORT markers held while ``gate`` is clear."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.held = 0

    def factory(self, broker: Broker) -> MarkerSender:
        real = rpc_marker_sender(broker)

        async def send(leader_id: int, marker: TxnMarkerEntry) -> Mapping[TopicPartition, Error]:
            if marker.result is TransactionResult.ABORT and not self.gate.is_set():
                self.held += 1
                await self.gate.wait()
            return await real(leader_id, marker)

        return send


@contextlib.asynccontextmanager
async def stalled_producer(cluster: SimCluster) -> AsyncIterator[tuple[Producer, int, int]]:
    """A producer whose application stalls with its transaction open (one record written)
    until the coordinator's timer aborts it: (the producer, its producer id, its epoch); the
    coordinator has fenced that epoch (+ 1)."""
    await create(cluster, TOPIC)
    config = {"transactional.id": TID, "transaction.timeout.ms": TIMEOUT_MS}
    async with producing(cluster, config, name="stalled") as stalled:
        await stalled.init_transactions()
        pid, epoch = stalled.producer_id, stalled.producer_epoch
        stalled.begin_transaction()
        await stalled.send(TOPIC, b"stalled")

        def aborted() -> bool:
            return in_state(cluster, S.PREPARE_ABORT) or in_state(cluster, S.COMPLETE_ABORT)

        await cluster.wait_for(aborted, what="the timeout abort", timeout_s=10 * TIMEOUT_MS / 1000)
        metadata = metadata_of(cluster)
        assert metadata is not None
        assert (metadata.producer_id, metadata.producer_epoch) == (pid, epoch + 1)
        yield stalled, pid, epoch


def epoch_and_state(cluster: SimCluster) -> tuple[int, TransactionState]:
    metadata = metadata_of(cluster)
    assert metadata is not None
    return metadata.producer_epoch, metadata.state


def test_the_stalled_producer_is_fenced_and_a_new_one_carries_on(tmp_path: Path) -> None:
    async def scenario(cluster: SimCluster) -> None:
        tp = TopicPartition(TOPIC, 0)
        async with stalled_producer(cluster) as (stalled, pid, epoch):
            await cluster.wait_for(lambda: in_state(cluster, S.COMPLETE_ABORT), what="markers")
            # It wakes up: its late send is refused by the partition's leader, which has seen
            # the abort marker's newer epoch (abortable, KIP-588) ...
            late = stalled.send(TOPIC, b"late")
            with pytest.raises(InvalidProducerEpochError):
                await late
            with pytest.raises(InvalidProducerEpochError):
                await stalled.commit_transaction()
            # ... and its abort, with the old epoch, is fenced: fatal, as Kafka's client.
            with pytest.raises(ProducerFencedError):
                await stalled.abort_transaction()
            with pytest.raises(ProducerFencedError):
                await stalled.commit_transaction()
            assert epoch_and_state(cluster) == (epoch + 1, S.COMPLETE_ABORT), "nothing changed"
        async with producing(cluster, {"transactional.id": TID}, name="replacement") as new:
            await new.init_transactions()
            assert (new.producer_id, new.producer_epoch) == (pid, epoch + 2)
            for i in range(2):
                new.begin_transaction()
                new.send(TOPIC, b"new-%d" % i)
                await new.commit_transaction()
        seen = await values_seen(cluster, [tp], 2, READ_COMMITTED, "reader")
        assert seen == [b"new-0", b"new-1"]

    simulate(tmp_path, scenario, **CONFIG)


def test_a_new_producer_waits_for_the_timeout_abort_s_markers(tmp_path: Path) -> None:
    markers = AbortGate()

    async def scenario(cluster: SimCluster) -> None:
        tp = TopicPartition(TOPIC, 0)
        async with stalled_producer(cluster) as (stalled, pid, epoch):
            assert in_state(cluster, S.PREPARE_ABORT) and markers.held
            answers = record_init_answers(cluster)
            async with producing(cluster, {"transactional.id": TID}, name="new") as new:
                init = asyncio.ensure_future(new.init_transactions())
                await cluster.wait_for(lambda: len(answers) >= 3, what="InitProducerId retries")
                assert not init.done()
                assert {a.error.error_name for a in answers if a.error} == {
                    "CONCURRENT_TRANSACTIONS"
                }
                markers.gate.set()
                await init
                assert answers[-1].error is None
                assert (new.producer_id, new.producer_epoch) == (pid, epoch + 2)
                new.begin_transaction()
                new.send(TOPIC, b"new")
                await new.commit_transaction()
            with pytest.raises(ProducerFencedError):
                await stalled.commit_transaction()
        assert await values_seen(cluster, [tp], 1, READ_COMMITTED, "reader") == [b"new"]

    simulate(tmp_path, scenario, marker_sender_factory=markers.factory, **CONFIG)
