"""The active controller's objects for one term, wired together.

Built when the broker wins the election, on the term's
:class:`~controller.term.Term`; the controller routes each event to one of them and drops
them all when it resigns.
"""

from __future__ import annotations

import random

from kafkasim.common.rpc import Transport
from kafkasim.controller.api import ControllerConfig
from kafkasim.controller.channel import ControllerChannel, ResponseCallback
from kafkasim.controller.cluster_changes import ClusterChanges
from kafkasim.controller.context import ControllerContext
from kafkasim.controller.leadership import Leadership
from kafkasim.controller.log import ControllerLog
from kafkasim.controller.partition_state_machine import PartitionStateMachine
from kafkasim.controller.stats import ControllerStats
from kafkasim.controller.term import Term, Watches
from kafkasim.controller.topic_admin import TopicAdmin
from kafkasim.controller.topic_deletion import TopicDeletionManager
from kafkasim.controller.zk_writer import FencedZkWriter


class ActiveController:
    """The partition state machine, the topic deletion manager, the leadership and
    cluster-change handlers and the topic admin of one term."""

    @classmethod
    def begin(
        cls,
        broker_id: int,
        ctx: ControllerContext,
        zk: FencedZkWriter,
        transport: Transport,
        *,
        config: ControllerConfig,
        log: ControllerLog,
        watches: Watches,
        on_stop_replica_response: ResponseCallback,
        rng: random.Random,
        stats: ControllerStats | None = None,
    ) -> ActiveController:
        """A new term: a channel to the brokers, and the objects built on them."""
        channel = ControllerChannel(
            transport,
            request_timeout_s=config.controller_socket_timeout_ms / 1000,
            backoff_initial_s=config.request_backoff_ms / 1000,
            backoff_max_s=config.request_backoff_max_ms / 1000,
        )
        term = Term(
            broker_id,
            ctx,
            zk=zk,
            channel=channel,
            config=config,
            log=log,
            watches=watches,
            on_stop_replica_response=on_stop_replica_response,
            stats=stats,
        )
        return cls(term, rng)

    def __init__(self, term: Term, rng: random.Random) -> None:
        self.term = term
        self.partitions = PartitionStateMachine(term)
        self.deletion = TopicDeletionManager(term, self.partitions)
        self.leadership = Leadership(term, self.partitions)
        self.cluster = ClusterChanges(term, self.partitions, self.deletion, self.leadership)
        self.admin = TopicAdmin(term, rng)
