"""The console's built-in workload: every refusal of ``POST /api/workload`` (a clear 4xx naming
what is wrong, nothing started), and the live verdict (acknowledgements judged only once the
consumer has read past them; an acks=1 loss shown as lost then)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from kafkasim.common.clock import ManualClock
from kafkasim.common.rpc import ClientTransport
from kafkasim.console.faults import FaultRefusedError, Injector
from kafkasim.console.replay import Replay
from kafkasim.console.server import LiveConsole, ReplayConsole, create_app
from kafkasim.console.workload import (
    IDLE,
    RATE_MAX,
    RUNNING,
    VERDICT_EVERY_MS,
    ConsoleWorkload,
    judge,
    parse_start,
    settled,
)
from kafkasim.faults.history import History, Op, OpType
from tests.unit.console.test_server import FakeCluster, FakeSource

TOPICS = {"t": 2}


def send(type_: OpType, value: str, partition: int = 0, offset: int | None = None,
         acks: str = "1") -> Op:  # fmt: skip
    return Op(type_, "send", "console-producer", 0, "t", partition, value, offset=offset,
              acks=acks)  # fmt: skip


def read(value: str, offset: int, partition: int = 0) -> Op:
    return Op(OpType.OK, "read", "console-consumer", 0, "t", partition, value, offset=offset,
              hw=offset + 1)  # fmt: skip


def acked(value: str, offset: int, partition: int = 0, acks: str = "1") -> list[Op]:
    return [send(OpType.INVOKE, value, partition, acks=acks),
            send(OpType.OK, value, partition, offset, acks=acks)]  # fmt: skip


# -- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"topic": "t", "rate": 10, "colour": "red"}, 400, "unknown fields ['colour']"),
        ({"rate": 10}, 400, "topic must be a topic name, got None"),
        ({"topic": "", "rate": 10}, 400, "topic must be a topic name"),
        ({"topic": "nope", "rate": 10}, 404, "unknown topic 'nope' (topics: t)"),
        ({"topic": "t"}, 400, "rate must be a number of records per second, got None"),
        ({"topic": "t", "rate": "fast"}, 400, "rate must be a number"),
        ({"topic": "t", "rate": True}, 400, "rate must be a number"),
        ({"topic": "t", "rate": float("nan")}, 400, "rate must be a number"),
        ({"topic": "t", "rate": 0}, 400, "rate must be above 0"),
        ({"topic": "t", "rate": -5}, 400, "rate must be above 0"),
        ({"topic": "t", "rate": RATE_MAX + 1}, 400, f"at most {RATE_MAX:g} records/s"),
        ({"topic": "t", "rate": 10, "acks": "2"}, 400, "INVALID_REQUIRED_ACKS"),
        ({"topic": "t", "rate": 10, "acks": True}, 400, "INVALID_REQUIRED_ACKS"),
        ({"topic": "t", "rate": 10, "acks": [1]}, 400, "INVALID_REQUIRED_ACKS"),
        ({"topic": "t", "rate": 10, "acks": 1, "idempotent": True}, 400, "acks to all"),
        ({"topic": "t", "rate": 10, "idempotent": "yes"}, 400, "idempotent must be"),
        ({"topic": "t", "rate": 10, "consumer": 1}, 400, "consumer must be true or false"),
    ],
)
def test_a_bad_start_is_refused_naming_what_is_wrong(
    body: dict[str, Any], status: int, says: str
) -> None:
    with pytest.raises(FaultRefusedError) as refused:
        parse_start(body, TOPICS)
    assert refused.value.status == status
    assert says in str(refused.value)


@pytest.mark.parametrize(
    ("acks", "expected", "idempotent"),
    [(0, "0", False), ("1", "1", False), (-1, "all", True), ("-1", "all", True),
     ("all", "all", True)],
)  # fmt: skip
def test_acks_as_kafka_spells_them(acks: object, expected: str, idempotent: bool) -> None:
    request = parse_start({"topic": "t", "rate": 2.5, "acks": acks}, TOPICS)
    assert (request.acks, request.idempotent) == (expected, idempotent)
    assert (request.partitions, request.rate, request.consumer) == (2, 2.5, True)


# -- the live verdict ------------------------------------------------------------------------


def test_acknowledgements_wait_for_the_consumer_to_read_past_them() -> None:
    ops = [*acked("a", 0), *acked("b", 1), *acked("c", 2), read("a", 0), read("b", 1)]
    kept, pending = settled(ops)
    assert pending == 1
    verdict = judge(History(ops=ops), final=False)
    assert verdict["verdict"] == "SAFE"
    assert verdict["counts"]["acknowledged"] == 2
    assert "1 acknowledged records not yet read past" in verdict["lines"][1]
    # The whole history judged as final: c was never read, so it is lost.
    assert judge(History(ops=ops), final=True)["verdict"] == "DATA LOST"
    assert len(kept) == len(ops) - 1


def test_an_acks_1_record_overwritten_by_a_new_leader_is_lost_once_read_past() -> None:
    # "b" was acknowledged at offset 1 by a leader that died before its followers had it; the
    # new leader wrote "c" at offset 1, which the consumer read.
    ops = [*acked("a", 0), *acked("b", 1), read("a", 0), *acked("c", 1), read("c", 1)]
    verdict = judge(History(ops=ops), final=False)
    assert verdict["verdict"] == "DATA LOST"
    assert verdict["counts"]["lost"] == 1
    assert any("'b'" in line for line in verdict["lines"])


def test_acks_0_sends_and_other_partitions_are_not_held_back() -> None:
    ops = [*acked("a", -1, acks="0"), *acked("x", 0, partition=1), read("x", 0, partition=1)]
    _, pending = settled(ops)
    assert pending == 0


def test_tick_judges_when_the_history_grew_and_notes_a_changed_verdict() -> None:
    clock = ManualClock()
    events: list[tuple[str, str]] = []

    def refuse() -> ClientTransport:
        raise AssertionError("no client is started here")

    async def main() -> None:
        w = ConsoleWorkload(refuse, list, list, clock, lambda k, t: events.append((k, t)))
        w.state = RUNNING
        w.history.ops.extend([*acked("a", 0), read("a", 0)])
        w.tick()
        await asyncio.gather(*w._tasks)
        assert w.verdict is not None and w.verdict["verdict"] == "SAFE"
        w.history.ops.extend([*acked("b", 1), *acked("c", 1), read("c", 1)])
        w.tick()  # too soon: the last verdict is not VERDICT_EVERY_MS old
        assert not w._tasks
        clock.advance(VERDICT_EVERY_MS)
        w.tick()
        await asyncio.gather(*w._tasks)
        assert w.verdict["verdict"] == "DATA LOST"
        assert w.status()["acknowledged"] == 3 and w.status()["read"] == 2

    asyncio.run(main())
    assert [k for k, _ in events] == ["verdict", "verdict"]
    assert "DATA LOST" in events[1][1]


# -- the endpoint ----------------------------------------------------------------------------


class Counting:
    def __init__(self) -> None:
        self.made = 0

    def __call__(self) -> ClientTransport:
        self.made += 1
        raise AssertionError("a refused request must start no client")


@pytest.fixture
def transports() -> Counting:
    return Counting()


@pytest.fixture
def console(transports: Counting) -> LiveConsole:
    cluster = FakeCluster()
    holder: list[LiveConsole] = []

    def note(kind: str, text: str) -> None:
        holder[0].note(kind, text)

    workload = ConsoleWorkload(transports, list, list, ManualClock(), note)
    console = LiveConsole(FakeSource(cluster), Injector(cluster, note), lambda: 0, workload)
    holder.append(console)
    return console


@pytest.fixture
def client(console: LiveConsole) -> Iterator[TestClient]:
    with TestClient(create_app(console), base_url="http://127.0.0.1:9021") as c:
        yield c


def test_the_view_carries_the_workload(client: TestClient) -> None:
    client.post("/api/fault", json={"action": "pause", "broker": 1})  # forces a poll
    workload = client.get("/api/view").json()["workload"]
    assert workload["state"] == IDLE and workload["verdict"] is None


@pytest.mark.parametrize(
    ("body", "status", "says"),
    [
        ({"action": "start", "topic": "nope", "rate": 10}, 404, "unknown topic 'nope'"),
        ({"action": "start", "topic": "t", "rate": 0}, 400, "rate must be above 0"),
        ({"action": "start", "topic": "t", "rate": 10, "acks": 3}, 400, "INVALID_REQUIRED_ACKS"),
        ({"action": "launch"}, 400, "action must be start or stop, got 'launch'"),
        ({"action": "stop"}, 409, "the workload is idle: nothing to stop"),
        ({"action": "stop", "now": True}, 400, "stop takes no other field"),
    ],
)
def test_bad_workload_requests_start_nothing(
    client: TestClient,
    console: LiveConsole,
    transports: Counting,
    *,
    body: dict[str, Any],
    status: int,
    says: str,
) -> None:
    client.post("/api/fault", json={"action": "pause", "broker": 1})  # the topics are known
    answer = client.post("/api/workload", json=body)
    assert answer.status_code == status, answer.text
    assert says in answer.json()["error"]
    assert transports.made == 0
    assert console.workload is not None and console.workload.state == IDLE


def test_a_malformed_body_is_refused(client: TestClient) -> None:
    as_json = {"content-type": "application/json"}
    answer = client.post("/api/workload", content=b"{rate: 10", headers=as_json)
    assert answer.status_code == 400 and "malformed JSON" in answer.json()["error"]
    answer = client.post("/api/workload", content=b"rate=10")  # a form: another site's
    assert answer.status_code == 415 and "application/json" in answer.json()["error"]
    answer = client.post("/api/workload", content=json.dumps([1, 2]), headers=as_json)
    assert answer.status_code == 400 and "JSON object" in answer.json()["error"]


def test_a_second_start_is_refused_while_one_runs(
    client: TestClient, console: LiveConsole, transports: Counting
) -> None:
    assert console.workload is not None
    console.workload.state = RUNNING
    answer = client.post("/api/workload", json={"action": "start", "topic": "t", "rate": 1})
    assert answer.status_code == 409 and "running (stop it first)" in answer.json()["error"]
    assert transports.made == 0
    console.workload.state = IDLE


def test_a_replay_has_no_workload() -> None:
    with TestClient(
        create_app(ReplayConsole(Replay(History()))), base_url="http://127.0.0.1:9021"
    ) as c:
        answer = c.post("/api/workload", json={"action": "stop"})
    assert answer.status_code == 409 and "replay" in answer.json()["error"]
