"""The console's built-in workload: a producer at a chosen rate and acks (and a consumer) that a
person starts and stops from the page, and a live verdict of the history checker over what it
sent and read.

It is the fault runner's workload (``faults.workload.Workload``) over a one-producer scenario
built here, recording into a ``faults.history.History``; the verdict is ``faults.checker``'s.
Nothing is written twice: the producer sends unique values round robin over the topic's
partitions and records every send (invoke, then ok/info/fail), the consumer reads every
partition from offset 0 below the HW and records every read, the sampler records replica
states — exactly as in a ``chaos`` run.

The live verdict. A send acknowledged at offset ``o`` can be judged only once the consumer has
read past ``o`` on its partition: before that, "not read yet" is not "lost". So while the
workload runs, the checker sees the history with the acknowledgements at or beyond the
consumer's position held back (``settled``): those sends count as pending (neither
acknowledged nor lost yet). An acks=1 record lost to a leader change shows as lost as soon as
the consumer reads past its offset (the new leader wrote other records there). ``stop`` stops
the producer, reads every partition from its log start to its HW (the runner's final read,
bounded) and judges the whole history: the final verdict.

Requests are checked before anything starts (``parse_start``): rate > 0 and at most
``RATE_MAX``, acks one of 0, 1, -1/all, a topic the cluster has, no unknown field; a refused
request starts nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kafkasim.common.clock import Clock
from kafkasim.common.errors import KafkasimError
from kafkasim.common.rpc import ClientTransport, RpcError
from kafkasim.console.faults import FaultRefusedError
from kafkasim.faults.checker import CheckReport, check
from kafkasim.faults.history import History, Op, OpType
from kafkasim.faults.scenario import (
    ClusterSpec,
    ConsumerSpec,
    ProducerSpec,
    Scenario,
    TopicSpec,
    WorkloadSpec,
)
from kafkasim.faults.workload import FinalReadError, Workload

__all__ = [
    "ACKS",
    "RATE_MAX",
    "ConsoleWorkload",
    "WorkloadRequest",
    "parse_start",
    "settled",
]

logger = logging.getLogger(__name__)

RATE_MAX: Final = 1000.0
"""Records per second at most: enough to see a loss, little enough for a laptop's cluster and
for a verdict recomputed every ``VERDICT_EVERY_MS``."""
ACKS: Final = {"0": "0", "1": "1", "-1": "all", "all": "all"}
FIELDS: Final = frozenset({"action", "topic", "rate", "acks", "consumer", "idempotent"})
PRODUCER, CONSUMER = "console-producer", "console-consumer"
IDLE, RUNNING, STOPPING, STOPPED = "idle", "running", "stopping", "stopped"
VERDICT_EVERY_MS: Final = 2000
STOP_SENDS_S: Final = 5.0
FINAL_READ_S: Final = 15.0
EXAMPLES_MAX: Final = 5


@dataclass(frozen=True, slots=True)
class WorkloadRequest:
    """A validated start: ``acks`` as the producer takes it ("0", "1", "all")."""

    topic: str
    partitions: int
    rate: float
    acks: str
    idempotent: bool
    consumer: bool


def parse_start(body: Mapping[str, object], topics: Mapping[str, int]) -> WorkloadRequest:
    """The start request ``body`` checked against the cluster's ``topics`` (name → number of
    partitions); FaultRefusedError (400 malformed, 404 unknown topic) saying what is wrong."""
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise FaultRefusedError(400, f"unknown fields {unknown}; expected {sorted(FIELDS)}")
    topic = body.get("topic")
    if not isinstance(topic, str) or not topic:
        raise FaultRefusedError(400, f"topic must be a topic name, got {topic!r}")
    if topic not in topics:
        known = ", ".join(sorted(topics)) or "none"
        raise FaultRefusedError(404, f"unknown topic {topic!r} (topics: {known})")
    rate = body.get("rate")
    if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate):
        raise FaultRefusedError(400, f"rate must be a number of records per second, got {rate!r}")
    if not 0 < rate <= RATE_MAX:
        raise FaultRefusedError(
            400, f"rate must be above 0 and at most {RATE_MAX:g} records/s, got {rate:g}"
        )
    raw_acks = body.get("acks", "all")
    acks = ACKS.get(str(raw_acks)) if isinstance(raw_acks, str | int) else None
    if acks is None or isinstance(raw_acks, bool):
        raise FaultRefusedError(
            400, f"INVALID_REQUIRED_ACKS: acks must be 0, 1, -1 or all, got {raw_acks!r}"
        )
    idempotent = body.get("idempotent", acks == "all")
    if not isinstance(idempotent, bool):
        raise FaultRefusedError(400, f"idempotent must be true or false, got {idempotent!r}")
    if idempotent and acks != "all":
        raise FaultRefusedError(
            400,
            f"Must set acks to all in order to use the idempotent producer (acks {raw_acks!r})",
        )
    consumer = body.get("consumer", True)
    if not isinstance(consumer, bool):
        raise FaultRefusedError(400, f"consumer must be true or false, got {consumer!r}")
    return WorkloadRequest(topic, topics[topic], float(rate), acks, idempotent, consumer)


def settled(ops: list[Op]) -> tuple[list[Op], int]:
    """The ops the live verdict judges, and how many acknowledgements it holds back: an ok
    send (acks 1 or all) at an offset the consumers have not read past on its partition stays
    an invoke until they have (see the module doc)."""
    position: dict[tuple[str, int], int] = {}
    for op in ops:
        if op.f == "read" and op.type is OpType.OK and op.offset is not None:
            key = (op.topic, op.partition)
            position[key] = max(position.get(key, 0), op.offset + 1)
    kept: list[Op] = []
    pending = 0
    for op in ops:
        if (
            op.f == "send"
            and op.type is OpType.OK
            and op.acks != "0"
            and (op.offset is None or op.offset >= position.get((op.topic, op.partition), 0))
        ):
            pending += 1
            continue
        kept.append(op)
    return kept, pending


def judge(history: History, *, final: bool) -> dict[str, Any]:
    """The verdict the page shows: the checker's over ``history`` (held back as ``settled``
    says unless ``final``)."""
    if final:
        report: CheckReport = check(history)
        pending = 0
    else:
        ops, pending = settled(history.ops)
        report = check(History(ops=ops, samples=history.samples))
    lines = report.verdict_lines(EXAMPLES_MAX)
    if pending:
        lines.insert(
            1,
            f"  live: {pending} acknowledged records not yet read past by the consumer "
            "are not judged yet",
        )
    return {
        "verdict": report.verdict,
        "ok": report.ok,
        "final": final,
        "pending": pending,
        "counts": report.counts(),
        "lines": lines,
    }


class ConsoleWorkload:
    """One workload at a time over the console's cluster. ``transport``: a new client
    transport (one per client, closed at stop); ``bootstrap``/``answering``: the brokers'
    addresses (all of them; those serving now, for the sampler); ``on_event(kind, text)``:
    the console's timeline."""

    def __init__(
        self,
        transport: Callable[[], ClientTransport],
        bootstrap: Callable[[], list[str]],
        answering: Callable[[], list[str]],
        clock: Clock,
        on_event: Callable[[str, str], None],
    ) -> None:
        self._transport = transport
        self._bootstrap = bootstrap
        self._answering = answering
        self.clock = clock
        self.on_event = on_event
        self.state = IDLE
        self.request: WorkloadRequest | None = None
        self.history = History()
        self.verdict: dict[str, Any] | None = None
        self._workload: Workload | None = None
        self._transports: list[ClientTransport] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._judged: tuple[int, int] = (-1, 0)  # (ops judged, when)
        self._every_ms = VERDICT_EVERY_MS
        self._counts = dict.fromkeys(("ops", "sent", "acknowledged", "read"), 0)
        self._judging = False
        self.lock = asyncio.Lock()

    def _new_transport(self, name: str) -> ClientTransport:
        del name
        transport = self._transport()
        self._transports.append(transport)
        return transport

    def _background(self, work: Callable[[], Any], name: str) -> None:
        task = asyncio.get_running_loop().create_task(work(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start(self, request: WorkloadRequest) -> str:
        async with self.lock:
            if self.state in (RUNNING, STOPPING):
                raise FaultRefusedError(409, f"the workload is {self.state} (stop it first)")
            producer = ProducerSpec(
                PRODUCER,
                request.topic,
                acks=request.acks,
                idempotent=request.idempotent,
                rate=request.rate,
            )
            consumers = (ConsumerSpec(CONSUMER, request.topic),) if request.consumer else ()
            scenario = Scenario(
                name="console",
                description="the console's built-in workload",
                expect="may-lose",
                cluster=ClusterSpec(topics=(TopicSpec(request.topic, request.partitions),)),
                workload=WorkloadSpec((producer,), consumers, duration_s=0.0, settle_s=0.0),
            )
            self.history = History(meta={"scenario": "console", "runtime": "console"})
            self.verdict = None
            self._judged = (-1, 0)
            self._every_ms = VERDICT_EVERY_MS
            self._counts = dict.fromkeys(self._counts, 0)
            self._workload = Workload(
                scenario=scenario,
                history=self.history,
                clock=self.clock,
                transport_for=self._new_transport,
                bootstrap=self._bootstrap(),
                start_ms=self.clock.monotonic_ms(),
                broker_addresses=self._answering,
            )
            self._workload.start()
            self.request = request
            self.state = RUNNING
            text = (
                f"console: workload started: {request.rate:g} records/s to {request.topic}, "
                f"acks={request.acks}{', idempotent' if request.idempotent else ''}"
                f"{', with a consumer' if request.consumer else ''}"
            )
            self.on_event("workload", text)
            return text

    async def stop(self) -> str:
        async with self.lock:
            if self.state != RUNNING or self._workload is None:
                raise FaultRefusedError(409, f"the workload is {self.state}: nothing to stop")
            self.state = STOPPING
            workload = self._workload
        self.on_event("workload", "console: workload stopping: final read, then the verdict")
        self._background(lambda: self._finish(workload), "console workload stop")
        return "stopping: the producer stops, a final read, then the final verdict"

    async def _finish(self, workload: Workload) -> None:
        note = ""
        try:
            await workload.stop_producers(STOP_SENDS_S)
            await workload.final_read(timeout_s=FINAL_READ_S)
        except (FinalReadError, KafkasimError, RpcError) as e:
            note = f" (final read incomplete: {e})"
        finally:
            await workload.stop()
            await self._close_transports()
        self.verdict = await asyncio.to_thread(judge, self.history, final=not note)
        self.state = STOPPED
        self._workload = None
        self.on_event("verdict", f"console: final verdict {self.verdict['verdict']}{note}")

    async def _close_transports(self) -> None:
        transports, self._transports = self._transports, []
        for transport in transports:
            with contextlib.suppress(Exception):
                await transport.close()

    def tick(self) -> None:
        """Called once per poll: recompute the live verdict in a worker thread when the
        history grew and the last one is old enough (never two at once): ``VERDICT_EVERY_MS``,
        or ten times what the last check took, so that checking a long run's history never
        takes more than a tenth of a core."""
        if self.state != RUNNING or self._judging:
            return
        now = self.clock.monotonic_ms()
        judged, when = self._judged
        if len(self.history.ops) == judged or (judged >= 0 and now - when < self._every_ms):
            return
        self._judging = True
        snapshot = History(ops=list(self.history.ops), samples=list(self.history.samples))
        self._judged = (len(snapshot.ops), now)
        self._background(lambda: self._judge_live(snapshot), "console verdict")

    async def _judge_live(self, snapshot: History) -> None:
        began = self.clock.monotonic_ms()
        try:
            verdict = await asyncio.to_thread(judge, snapshot, final=False)
        finally:
            self._judging = False
        self._every_ms = max(VERDICT_EVERY_MS, 10 * (self.clock.monotonic_ms() - began))
        if self.state != RUNNING:
            return  # the final verdict replaces it
        before = None if self.verdict is None else self.verdict["verdict"]
        self.verdict = verdict
        if verdict["verdict"] != before:
            self.on_event("verdict", f"live verdict: {verdict['lines'][0]}")

    def _count(self) -> dict[str, int]:
        """Sends, acknowledgements and reads so far (only the ops added since last time are
        walked)."""
        ops, counts = self.history.ops, self._counts
        for op in ops[counts["ops"] :]:
            if op.f == "send":
                counts["sent"] += op.type is OpType.INVOKE
                counts["acknowledged"] += op.type is OpType.OK
            elif op.f == "read":
                counts["read"] += 1
        counts["ops"] = len(ops)
        return counts

    def status(self) -> dict[str, Any]:
        """The workload's part of the view."""
        request = self.request
        counts = self._count()
        return {
            "state": self.state,
            "topic": None if request is None else request.topic,
            "rate": None if request is None else request.rate,
            "acks": None if request is None else request.acks,
            "consumer": None if request is None else request.consumer,
            "sent": counts["sent"],
            "acknowledged": counts["acknowledged"],
            "read": counts["read"],
            "verdict": self.verdict,
        }

    async def close(self) -> None:
        if self._workload is not None:
            await self._workload.stop()
            self._workload = None
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._close_transports()
