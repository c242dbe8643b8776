"""One controller term built by hand, for testing the term's objects on their own: a won
election on a SimZooKeeper, a context holding the given brokers and topics, a fenced writer,
and a channel to a recording transport. No Controller and no event queue."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from google.protobuf.message import Message

from kafkasim.common.coordination import WatchEvent
from kafkasim.common.types import TopicPartition
from kafkasim.controller import campaign, zk_data
from kafkasim.controller.api import ControllerConfig
from kafkasim.controller.channel import ControllerChannel
from kafkasim.controller.context import ControllerContext
from kafkasim.controller.log import ControllerLog
from kafkasim.controller.term import Term, Watches
from kafkasim.controller.zk_access import RetryingCoordination
from kafkasim.controller.zk_data import BrokerInfo, LeaderAndIsr
from kafkasim.controller.zk_writer import FencedZkWriter
from kafkasim.sim.zookeeper import SimZooKeeperClient, SimZooKeeperServer

from .harness import QUIET_CONFIG, SESSION_TIMEOUT_MS, RecordingTransport

CONTROLLER_ID = 1


def _ignore(event: WatchEvent) -> None:
    return None


@dataclass
class TermBench:
    server: SimZooKeeperServer
    zk: RetryingCoordination
    term: Term
    transport: RecordingTransport
    stop_replica_answers: list[tuple[int, Message, Message]] = field(default_factory=list)

    async def sent(self) -> RecordingTransport:
        """Wait until every request queued so far was answered; the transport."""
        await self.term.channel.drain()
        return self.transport

    async def state(self, tp: TopicPartition) -> LeaderAndIsr:
        data, stat = await self.zk.get(zk_data.partition_state_path(tp))
        return zk_data.decode_partition_state(data, stat.version)

    async def write_state(self, tp: TopicPartition, state: LeaderAndIsr) -> None:
        """A state znode as a previous controller left it (the context knows it too)."""
        await self.zk.create(
            zk_data.partition_state_path(tp), zk_data.encode_partition_state(state), makepath=True
        )
        self.term.ctx.leadership[tp] = await self.state(tp)

    async def close(self) -> None:
        await self.term.channel.close()
        await self.zk.zk.close()


async def term_bench(
    live: Sequence[int],
    topics: Mapping[str, Mapping[int, Sequence[int]]] = {},
    *,
    config: ControllerConfig = QUIET_CONFIG,
    server: SimZooKeeperServer | None = None,
) -> TermBench:
    """Win the election as broker 1, with ``live`` brokers registered in the context and in
    the channel and ``topics`` written to ZooKeeper and loaded into the context."""
    server = server or SimZooKeeperServer()
    client = SimZooKeeperClient(server, SESSION_TIMEOUT_MS, "controller")
    await client.start()
    zk = RetryingCoordination(client, 3, 0.1)
    await campaign.ensure_persistent_paths(zk)
    won, _ = await campaign.campaign(zk, CONTROLLER_ID, 0)
    assert won is not None
    epoch, version = won
    log = ControllerLog(CONTROLLER_ID, lambda: epoch)
    ctx = ControllerContext(epoch, version)
    transport = RecordingTransport()
    channel = ControllerChannel(
        transport, request_timeout_s=1.0, backoff_initial_s=0.1, backoff_max_s=1.0
    )
    for b in live:
        info = BrokerInfo(b, f"broker{b}", 9092, epoch=100 + b)
        ctx.live_brokers[b] = info
        channel.add_broker(info)
    for topic, assignment in topics.items():
        await zk.create(
            zk_data.topic_path(topic),
            zk_data.encode_topic_assignment({p: list(r) for p, r in assignment.items()}),
        )
        ctx.add_topic(topic, assignment, 0)
    answers: list[tuple[int, Message, Message]] = []
    term = Term(
        CONTROLLER_ID,
        ctx,
        zk=FencedZkWriter(zk, epoch, version, log),
        channel=channel,
        config=config,
        log=log,
        watches=Watches(
            broker_change=_ignore,
            topic_change=_ignore,
            topic_deletion=_ignore,
            isr_change=_ignore,
            preferred_election=_ignore,
            make_partition_watcher=lambda topic: _ignore,
        ),
        on_stop_replica_response=lambda b, req, resp: answers.append((b, req, resp)),
    )
    return TermBench(server, zk, term, transport, answers)


async def bump_controller_epoch(bench: TermBench) -> None:
    """Another controller took over: ``/controller_epoch`` moved on."""
    data, stat = await bench.zk.get(zk_data.CONTROLLER_EPOCH)
    epoch = zk_data.decode_controller_epoch(data)
    await bench.zk.zk.set(
        zk_data.CONTROLLER_EPOCH, zk_data.encode_controller_epoch(epoch + 1), stat.version
    )
