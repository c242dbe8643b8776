"""How the runner applies the one-way network faults, clock drift and a slow disk
(``partition_one_way``, ``slow_one_way``, ``clock_drift``, ``slow_disk``; part of
``faults.runner.APPLY``, which applies ``torn_write`` beside ``crash``). They need only the
run's backend (``LinkRun``), so this module does not import the runner.

A one-way fault names its target and, in ``peer``, the broker at the other end (0: every other
broker); ``inbound`` turns the direction round. It becomes a list of directed broker pairs
``(src, dst)`` (a target is never its own peer), each cut or slowed through the backend, and
undone pair by pair when the fault heals.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from kafkasim.faults.actions import PEER_ALL
from kafkasim.faults.backend import Backend
from kafkasim.faults.scenario import Fault

Undo = Callable[[], Awaitable[None]]


class LinkRun(Protocol):
    """What these faults need of a run: its backend."""

    @property
    def backend(self) -> Backend: ...


__all__ = [
    "LinkRun",
    "clock_drift",
    "directed_pairs",
    "partition_one_way",
    "slow_disk",
    "slow_one_way",
]


def directed_pairs(
    fault: Fault, targets: list[int], brokers: tuple[int, ...]
) -> list[tuple[int, int]]:
    """The directed links ``(src, dst)`` a one-way fault on ``targets`` acts on, in order."""
    peer = int(fault.params.get("peer", PEER_ALL))
    inbound = bool(fault.params.get("inbound", False))
    pairs: list[tuple[int, int]] = []
    for target in targets:
        peers = [b for b in brokers if b != target] if peer == PEER_ALL else [peer]
        for other in peers:
            if other != target:
                pairs.append((other, target) if inbound else (target, other))
    return pairs


async def partition_one_way(run: LinkRun, fault: Fault, targets: list[int]) -> Undo:
    pairs = directed_pairs(fault, targets, run.backend.broker_ids)
    for src, dst in pairs:
        await run.backend.cut_one_way(src, dst)

    async def undo() -> None:
        for src, dst in pairs:
            await run.backend.heal_one_way(src, dst)

    return undo


async def slow_one_way(run: LinkRun, fault: Fault, targets: list[int]) -> Undo:
    latency = float(fault.params["latency_ms"])
    jitter = float(fault.params.get("jitter_ms", 0.0))
    pairs = directed_pairs(fault, targets, run.backend.broker_ids)
    for src, dst in pairs:
        await run.backend.slow_link(src, dst, latency, jitter)

    async def undo() -> None:
        for src, dst in pairs:
            await run.backend.normal_link(src, dst)

    return undo


async def clock_drift(run: LinkRun, fault: Fault, targets: list[int]) -> Undo:
    rate = float(fault.params["rate"])
    for broker_id in targets:
        await run.backend.clock_drift(broker_id, rate)

    async def undo() -> None:
        for broker_id in targets:
            await run.backend.clock_drift(broker_id, 1.0)

    return undo


async def slow_disk(run: LinkRun, fault: Fault, targets: list[int]) -> Undo:
    """The targets' disks slow down (each its own); undo: their normal speed again."""
    write_ms = float(fault.params.get("write_latency_ms", 0.0))
    fsync_ms = float(fault.params.get("fsync_latency_ms", 0.0))
    for broker_id in targets:
        await run.backend.slow_disk(broker_id, write_ms, fsync_ms)

    async def undo() -> None:
        for broker_id in targets:
            await run.backend.normal_disk(broker_id)

    return undo
