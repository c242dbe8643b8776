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

__all__ = ["ACTIONS", "ActionSpec", "Duration", "ParamKind", "ParamSpec"]


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
        (
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
        ),
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
)
ACTIONS: Final[Mapping[str, ActionSpec]] = MappingProxyType({a.name: a for a in _ACTION_LIST})
"""Every fault action by name, in the order of the docs."""


# -- reading TOML ----------------------------------------------------------------------------
