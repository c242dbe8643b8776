"""The active controller's objects for one term, wired together.

Built when the broker wins the election, on the term's
:class:`~controller.term.Term`; the controller routes each event to one of them and drops
them all when it resigns.
"""

from __future__ import annotations

import random

from kafkasim.controller.cluster_changes import ClusterChanges
from kafkasim.controller.leadership import Leadership
from kafkasim.controller.partition_state_machine import PartitionStateMachine
from kafkasim.controller.term import Term
from kafkasim.controller.topic_admin import TopicAdmin
from kafkasim.controller.topic_deletion import TopicDeletionManager


class ActiveController:
    """The partition state machine, the topic deletion manager, the leadership and
    cluster-change handlers and the topic admin of one term."""

    def __init__(self, term: Term, rng: random.Random) -> None:
        self.term = term
        self.partitions = PartitionStateMachine(term)
        self.deletion = TopicDeletionManager(term, self.partitions)
        self.leadership = Leadership(term, self.partitions)
        self.cluster = ClusterChanges(term, self.partitions, self.deletion, self.leadership)
        self.admin = TopicAdmin(term, rng)
