"""What the controller counts for its metrics (Kafka's ``ControllerStats``): leader elections
and the time they took, and unclean ones. One object per controller, kept across its terms (a
broker's counters only grow, as Kafka's meters over a broker's life)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(slots=True)
class ControllerStats:
    """``now_ms``: the controller's monotonic clock, which times the elections.

    ``leader_elections`` counts each election round that gave at least one partition a new
    leader (``LeaderElectionRateAndTimeMs``'s count) and ``leader_election_time_ms`` the time
    those rounds took (its sum); ``unclean_leader_elections`` counts partitions whose new leader
    was not in the ISR (``UncleanLeaderElectionsPerSec``)."""

    now_ms: Callable[[], int]
    leader_elections: int = 0
    leader_election_time_ms: int = 0
    unclean_leader_elections: int = 0

    def record(self, started_ms: int, elected: int, unclean: int) -> None:
        """An election round that started at ``started_ms`` has ended."""
        if elected:
            self.leader_elections += 1
            self.leader_election_time_ms += self.now_ms() - started_ms
        self.unclean_leader_elections += unclean
