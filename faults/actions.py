"""The fault actions of the scenario language: what each does, which targets it takes, whether
it has a duration, its parameters. Every runner and backend is keyed by these names."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from kafkasim.faults.scenario import (
    CLOCK_JUMP_S_MAX,
    LATENCY_MS_MAX,
    RUN_S_MAX,
    TargetKind,
)

__all__ = ["ACTIONS", "PEER_ALL", "ActionSpec", "Duration", "ParamKind", "ParamSpec"]


class Duration(enum.Enum):
    REQUIRED = "required"
    OPTIONAL = "optional"  # given: the broker comes back after it
    NONE = "none"


class ParamKind(enum.Enum):
    BOOL = "bool"
    NUMBER = "number"  # stored as float
    GROUPS = "groups"  # list of lists of broker ids


@dataclass(frozen=True, slots=True)
class ParamSpec:
    """One parameter of an action: numbers lie in [low, high], and are not 0 if ``nonzero``."""

    name: str
    kind: ParamKind
    doc: str
    required: bool = False
    default: bool | float | None = None
    low: float | None = None
    high: float | None = None
    nonzero: bool = False


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """What an action is, which targets it takes (``no_target``: "" is valid too), whether it
    has a duration, and its parameters."""

    name: str
    doc: str
    targets: frozenset[TargetKind]
    duration: Duration
    params: tuple[ParamSpec, ...] = ()
    no_target: bool = False


_BROKER_LIKE: Final = frozenset(
    {
        TargetKind.BROKER,
        TargetKind.LEADER,
        TargetKind.FOLLOWER,
        TargetKind.CONTROLLER,
        TargetKind.RANDOM,
        TargetKind.TXN_COORDINATOR,
    }
)
_ANY: Final = _BROKER_LIKE | {TargetKind.ALL}
POSITIVE: Final = 1e-9  # "low" for the numbers that must be > 0
CLOCK_RATE_MIN: Final = 0.1
CLOCK_RATE_MAX: Final = 10.0
PEER_ALL: Final = 0  # the ``peer`` of a one-way fault: every other broker

_PEER: Final = ParamSpec(
    "peer",
    ParamKind.NUMBER,
    "The broker id at the other end of the cut links; 0: every other broker.",
    default=float(PEER_ALL),
    low=0.0,
    high=float(2**31 - 1),
)


_DELAY: Final = (
    ParamSpec(
        "latency_ms",
        ParamKind.NUMBER,
        "Added one-way delay.",
        required=True,
        low=POSITIVE,
        high=LATENCY_MS_MAX,
    ),
    ParamSpec(
        "jitter_ms",
        ParamKind.NUMBER,
        "Up to this much more, uniformly.",
        default=0.0,
        low=0.0,
        high=LATENCY_MS_MAX,
    ),
)
"""The delay parameters of slow_network and slow_one_way."""


_ACTION_LIST: Final = (
    ActionSpec(
        "crash",
        "Kill the broker at once (kill -9): no controlled shutdown, no flush; its "
        "ZooKeeper session expires after zookeeper.session.timeout.ms. "
        "lose_unflushed = true also drops every byte not yet fsynced, as a machine "
        "losing power would (the page cache is gone; a write may be torn). With "
        "duration_s the broker is started again after it, otherwise it stays down "
        "until a restart.",
        _ANY,
        Duration.OPTIONAL,
        (
            ParamSpec(
                "lose_unflushed",
                ParamKind.BOOL,
                "Also lose what was not fsynced (power loss).",
                default=False,
            ),
        ),
    ),
    ActionSpec(
        "restart",
        "Start a broker that is down (crashed or shut down); one that runs is left "
        "alone. all: every broker that is down.",
        frozenset({TargetKind.BROKER, TargetKind.ALL}),
        Duration.NONE,
    ),
    ActionSpec(
        "pause",
        "Freeze the broker's process (SIGSTOP) for duration_s, then resume it (SIGCONT).",
        _BROKER_LIKE,
        Duration.REQUIRED,
    ),
    ActionSpec(
        "isolate",
        "Cut the broker off from everyone (other brokers, ZooKeeper, clients) for "
        "duration_s, then heal.",
        _BROKER_LIKE,
        Duration.REQUIRED,
    ),
    ActionSpec(
        "split",
        "Split the brokers into sides that cannot reach each other for duration_s: "
        "params.groups puts every broker id in exactly one group, or (no groups) the "
        "target is one side and every other broker the other. ZooKeeper and clients "
        "reach every side.",
        _BROKER_LIKE,
        Duration.REQUIRED,
        (
            ParamSpec(
                "groups",
                ParamKind.GROUPS,
                "Lists of broker ids, one list per side (instead of a target).",
            ),
        ),
        no_target=True,
    ),
    ActionSpec(
        "isolate_zk",
        "Cut the broker off from ZooKeeper only for duration_s (all: a ZooKeeper outage).",
        _ANY,
        Duration.REQUIRED,
    ),
    ActionSpec(
        "expire_session",
        "Expire the broker's ZooKeeper session: its ephemeral registration (and the "
        "controller znode, if it holds it) goes; it registers again with a new session.",
        _ANY,
        Duration.NONE,
    ),
    ActionSpec(
        "slow_network",
        "Delay every message to and from the broker by latency_ms plus a uniform "
        "0..jitter_ms for duration_s (all: every link).",
        _ANY,
        Duration.REQUIRED,
        _DELAY,
    ),
    ActionSpec(
        "disk_full",
        "Every append under the broker's log directories fails (no space) for duration_s: "
        "the broker answers KAFKA_STORAGE_ERROR and halts; when the disk has room again it "
        "is restarted.",
        _ANY,
        Duration.REQUIRED,
    ),
    ActionSpec(
        "clock_jump",
        "Step the broker's wall clock (not its monotonic clock) by seconds; negative "
        "steps go back.",
        _ANY,
        Duration.NONE,
        (
            ParamSpec(
                "seconds",
                ParamKind.NUMBER,
                "The step.",
                required=True,
                low=-CLOCK_JUMP_S_MAX,
                high=CLOCK_JUMP_S_MAX,
                nonzero=True,
            ),
        ),
    ),
    ActionSpec(
        "rolling_restart",
        "Restart every broker in turn, lowest id first, each with a controlled "
        "shutdown; each next one interval_s after the previous began, so it spans "
        "brokers * interval_s.",
        frozenset(),
        Duration.NONE,
        (
            ParamSpec(
                "interval_s",
                ParamKind.NUMBER,
                "Time between two brokers' restarts.",
                required=True,
                low=POSITIVE,
                high=RUN_S_MAX,
            ),
        ),
        no_target=True,
    ),
    ActionSpec(
        "controlled_shutdown",
        "Controlled shutdown: leadership moves away, then a clean stop (flush, "
        "checkpoints). With duration_s the broker is started again after it, "
        "otherwise it stays down until a restart.",
        _BROKER_LIKE,
        Duration.OPTIONAL,
    ),
    ActionSpec(
        "partition_one_way",
        "Cut one direction of the target's links to its peers for duration_s: every message "
        "the target sends to a peer is lost while the peer's still reach it (the peer no "
        "longer hears the target); inbound = true cuts the other direction (the target no "
        "longer hears the peer: a follower whose fetch requests reach its leader but whose "
        "answers never come back). ZooKeeper and clients keep both directions.",
        _BROKER_LIKE,
        Duration.REQUIRED,
        (
            _PEER,
            ParamSpec(
                "inbound",
                ParamKind.BOOL,
                "Cut what the peers send to the target instead of what it sends them.",
                default=False,
            ),
        ),
    ),
    ActionSpec(
        "slow_one_way",
        "Delay one direction of the target's links to its peers for duration_s: each message "
        "the target sends a peer takes latency_ms plus a uniform 0..jitter_ms more; inbound = "
        "true delays what the peers send the target instead (target follower:T-P: the "
        "answers to that one follower's fetches come late). The other direction, ZooKeeper "
        "and clients keep their speed.",
        _BROKER_LIKE,
        Duration.REQUIRED,
        (
            *_DELAY,
            _PEER,
            ParamSpec(
                "inbound",
                ParamKind.BOOL,
                "Delay what the peers send to the target instead of what it sends them.",
                default=False,
            ),
        ),
    ),
    ActionSpec(
        "clock_drift",
        "The broker's wall clock runs rate times as fast as real time for duration_s, then "
        "at the normal rate again, keeping the skew it gained "
        "(a fast clock stays ahead until stepped). What the broker derives from its clock "
        "drifts with it: segment.ms rolls, time-based retention, the timestamps it assigns, "
        "the replica lag it measures. all: every broker, each by itself.",
        _ANY,
        Duration.REQUIRED,
        (
            ParamSpec(
                "rate",
                ParamKind.NUMBER,
                "How fast the clock runs (2: twice as fast; 0.5: half as fast).",
                required=True,
                low=CLOCK_RATE_MIN,
                high=CLOCK_RATE_MAX,
            ),
        ),
    ),
    ActionSpec(
        "torn_write",
        "A power cut in the middle of a write: the broker dies at once (kill -9) and, in "
        "each of its logs whose last batch was not yet fsynced, only a random prefix of that "
        "batch reached the disk (the log is cut at a random byte inside it; everything before "
        "the batch is kept). Its recovery at restart must truncate the torn batch. With "
        "duration_s the broker is started again after it, otherwise it stays down until a "
        "restart.",
        _ANY,
        Duration.OPTIONAL,
    ),
    ActionSpec(
        "slow_disk",
        "The broker's disk is slow for duration_s: each log write (a leader's append of a "
        "produce, a follower's append of what it fetched) waits write_latency_ms and each "
        "fsync (flush.messages, a segment roll) fsync_latency_ms, one at a time on the "
        "broker's one disk, blocking whoever appends: a slowed leader answers produces late, "
        "a slowed follower falls behind and leaves the ISR after replica.lag.time.max.ms. "
        "all: every broker, each its own disk.",
        _ANY,
        Duration.REQUIRED,
        (
            ParamSpec(
                "write_latency_ms",
                ParamKind.NUMBER,
                "How long each log write takes.",
                default=0.0,
                low=0.0,
                high=LATENCY_MS_MAX,
            ),
            ParamSpec(
                "fsync_latency_ms",
                ParamKind.NUMBER,
                "How long each fsync takes.",
                default=0.0,
                low=0.0,
                high=LATENCY_MS_MAX,
            ),
        ),
    ),
)
ACTIONS: Final[Mapping[str, ActionSpec]] = MappingProxyType({a.name: a for a in _ACTION_LIST})
"""Every fault action by name, in the order of the docs."""


# -- reading TOML ----------------------------------------------------------------------------
