"""The controller: one broker at a time decides leaders and ISRs and tells the others.

Runs inside every broker, as in Kafka's ZooKeeper mode; the one that wins ``/controller`` is
*active*, the others only watch that znode and campaign when it goes.

Theory of operation
-------------------
1. **Election and fencing.** A broker campaigns by creating the ephemeral ``/controller`` and
   incrementing ``/controller_epoch`` in one ZooKeeper ``multi`` (creating the epoch znode
   with 0 first if absent, so the first controller has epoch 1). The epoch znode's *version*
   after that write is the fence: every later write of the active controller is a ``multi``
   that starts with ``CheckOp("/controller_epoch", version)``. A deposed controller that has
   not noticed yet (a zombie) therefore cannot change anything; when one of its writes fails
   that way, it resigns. Brokers drop requests carrying an older ``controller_epoch``.
2. **One event queue.** ZooKeeper watches, admin calls, controlled shutdowns and broker
   answers become events, handled one at a time by one asyncio task (Kafka's
   ``ControllerEventManager``). No two decisions interleave, so the in-memory
   :class:`~controller.context.ControllerContext` is only ever changed by the event being handled.
3. **Read, decide, conditionally write.** Brokers change ISRs themselves (version-checked
   writes), so before any decision the controller re-reads the partition state znode, decides
   with the pure functions of :mod:`controller.election`, and writes with the version it read
   (``SetOp(path, data, zk_version)``) inside the fenced multi. ``BadVersionError``: somebody
   wrote meanwhile; re-read and decide again (bounded attempts, then the partition is reported
   as failed and logged). A partition state znode naming a newer controller epoch means this
   controller is a zombie: resign.
4. **Tell the brokers.** Decisions of one event are collected in a
   :class:`~controller.channel.RequestBatch` and sent through the
   :class:`~controller.channel.ControllerChannel` (ordered, retried per broker).

Invariants (also asserted by :func:`controller.election.sanity_check` before each write):
leader ∈ ISR ⊆ assigned replicas; leader epochs only grow (every new leader or ISR decided by
the controller has epoch + 1); without unclean election the ISR is never emptied and only an
ISR member becomes leader; every controller write is fenced by the controller epoch.

Failures: ZooKeeper connection loss is retried (bounded) on every operation; session expiry
makes the controller resign (it campaigns again once the broker hands it a new session with
:meth:`Controller.replace_session`, or when the same client reports a new session); a broker
that does not answer is retried until it is declared dead; an unexpected error while becoming
controller resigns and deletes ``/controller`` so that another election runs.

Where the code lives
--------------------
One class, :class:`Controller`, assembled from one room per concern (each a module; each
room's class builds on :class:`~controller.core.ControllerCore`)::

    controller/api.py               ControllerConfig, the admin values and results, the errors
    controller/context.py           ControllerContext (the picture), ControllerSnapshot (a copy)
    controller/zk_access.py         the Coordination port with connection loss retried
    controller/core.py              event queue, election and fencing, fenced writes, requests
    controller/partition_states.py  leader/ISR changes: new partitions, offline elections
    controller/leadership.py        controlled shutdown, elections on request, auto rebalance
    controller/topic_deletion.py    queued deletions driven by StopReplica answers
    controller/cluster_changes.py   failover, reconnection, broker/topic/partition/ISR watches
    controller/topic_admin.py       CreateTopics, DeleteTopics, CreatePartitions, configs
    controller/controller.py        this module: the assembled Controller and the public names

The pure decisions it relies on live in :mod:`controller.election` (leaders and ISRs),
:mod:`controller.assignment` (replica placement) and :mod:`controller.topic_configs`
(incremental config changes); the ZooKeeper paths and JSON in :mod:`controller.zk_data`.
"""

from __future__ import annotations

import random

from kafkasim.common.clock import Clock
from kafkasim.common.coordination import Coordination
from kafkasim.common.rpc import Transport
from kafkasim.controller.api import (
    BrokerNotAvailableError,
    ControllerConfig,
    ControllerMovedError,
    ElectionOutcome,
    ElectionType,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicError,
    NewPartitions,
    NewTopic,
    NotControllerError,
    RequestTimedOutError,
    StaleBrokerEpochError,
    TopicAlreadyExistsError,
    TopicConfigAlteration,
    TopicResult,
    UnknownTopicOrPartitionError,
)
from kafkasim.controller.cluster_changes import ClusterChanges
from kafkasim.controller.context import ControllerContext, ControllerSnapshot, PartitionView
from kafkasim.controller.core import UNCLEAN_LEADER_ELECTION_ENABLE, logger
from kafkasim.controller.topic_admin import RESOURCE_TYPE_TOPIC, TopicAdmin

__all__ = [
    "RESOURCE_TYPE_TOPIC",
    "UNCLEAN_LEADER_ELECTION_ENABLE",
    "BrokerNotAvailableError",
    "Controller",
    "ControllerConfig",
    "ControllerContext",
    "ControllerMovedError",
    "ControllerSnapshot",
    "ElectionOutcome",
    "ElectionType",
    "InvalidPartitionsError",
    "InvalidRequestError",
    "InvalidTopicError",
    "NewPartitions",
    "NewTopic",
    "NotControllerError",
    "PartitionView",
    "RequestTimedOutError",
    "StaleBrokerEpochError",
    "TopicAlreadyExistsError",
    "TopicConfigAlteration",
    "TopicResult",
    "UnknownTopicOrPartitionError",
    "logger",
]


class Controller(TopicAdmin, ClusterChanges):
    """Kafka's controller for one broker: campaigns, and when active, manages the cluster.

    The broker creates one per process and calls :meth:`start` after registering itself in
    ``/brokers/ids`` (either order works) and :meth:`stop` on shutdown. While this broker is
    the active controller, the broker's request handlers call the admin entry points
    (:meth:`create_topics`, :meth:`delete_topics`, :meth:`create_partitions`,
    :meth:`alter_topic_configs`, :meth:`elect_leaders`, :meth:`controlled_shutdown`, or their
    ``handle_*`` protobuf forms); on any other broker those raise (or answer) NOT_CONTROLLER.

    ``rng`` draws Kafka's random start index and shift of new topics' replica assignments
    (seed it for the simulation; the default is seeded with the broker id).
    """

    def __init__(
        self,
        broker_id: int,
        coordination: Coordination,
        transport: Transport,
        clock: Clock,
        *,
        config: ControllerConfig | None = None,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(broker_id, coordination, transport, clock, config=config, rng=rng)
        # The watch handlers of the rooms: one watcher object per path, so that
        # re-registering a watch does not stack duplicates.
        self._broker_change_watcher = self._watcher("BrokerChange", self._process_broker_change)
        self._topic_change_watcher = self._watcher("TopicChange", self._process_topic_change)
        self._topic_deletion_watcher = self._watcher("TopicDeletion", self._process_topic_deletion)
        self._isr_change_watcher = self._watcher(
            "IsrChangeNotification", self._process_isr_change_notification
        )
        self._preferred_election_watcher = self._watcher(
            "ReplicaLeaderElection", self._process_preferred_election_znode
        )
