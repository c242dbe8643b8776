"""The console's endpoints (Starlette's TestClient): the view, the event stream, the fault
buttons and every refusal (a clear 4xx naming what is wrong, nothing injected)."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from kafkasim.cluster.chaos import LOCAL
from kafkasim.console.faults import Injector
from kafkasim.console.model import UP, BrokerState, PartitionState, Snapshot
from kafkasim.console.replay import Replay
from kafkasim.console.server import LiveConsole, ReplayConsole, create_app
from kafkasim.faults.backend import BackendSpec
from kafkasim.faults.history import FaultEvent, History, ReplicaSample
from kafkasim.faults.report import plotly_js


class FakeCluster:
    """A ChaosBackend that records the steps asked of it."""

    spec: BackendSpec = LOCAL
    broker_ids = (1, 2, 3)
    bootstrap: tuple[str, ...] = ()
    kafka_bootstrap: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.up = {1: True, 2: True, 3: True}

    def running(self, broker_id: int) -> bool:
        return self.up[broker_id]

    def refresh(self) -> None:
        pass  # running() is current

    def kill(self, broker_id: int, sig: signal.Signals) -> None:
        self.calls.append((sig.name, broker_id))
        self.up[broker_id] = False

    def start_broker(self, broker_id: int) -> None:
        self.calls.append(("start", broker_id))
        self.up[broker_id] = True

    def serving_again(self, broker_id: int) -> bool:
        return True

    def exit_note(self, broker_id: int) -> str:
        return "status 0"

    def pause(self, broker_id: int) -> None:
        self.calls.append(("pause", broker_id))

    def resume(self, broker_id: int) -> None:
        self.calls.append(("resume", broker_id))

    def isolate(self, broker_id: int) -> None:
        raise AssertionError("refused before")

    def reconnect(self, broker_id: int) -> None:
        raise AssertionError("refused before")


class FakeSource:
    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.changed = asyncio.Event()
        self.requests = 0
        self.t = 0

    async def snapshot(self) -> Snapshot:
        self.t += 1000
        self.requests += 3
        brokers = tuple(
            BrokerState(b, f"127.0.0.1:{9000 + b}", process=UP if up else "down")
            for b, up in self.cluster.up.items()
        )
        leader = next((b for b, up in self.cluster.up.items() if up), -1)
        isr = tuple(b for b, up in self.cluster.up.items() if up)
        return Snapshot(
            self.t, brokers, leader, (PartitionState("t", 0, (1, 2, 3), leader, 0, isr),)
        )

    async def close(self) -> None:
        pass


@pytest.fixture
def cluster() -> FakeCluster:
    return FakeCluster()


@pytest.fixture
def client(cluster: FakeCluster) -> Iterator[TestClient]:
    holder: list[LiveConsole] = []

    def note(kind: str, text: str) -> None:
        holder[0].note(kind, text)

    injector = Injector(cluster, note)
    console = LiveConsole(FakeSource(cluster), injector, lambda: 0)
    holder.append(console)
    with TestClient(create_app(console), base_url="http://127.0.0.1:9021") as c:
        yield c


def test_the_page_and_its_files_are_served_from_the_package(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200
    assert "/static/plotly.min.js" in page.text and "/static/console.js" in page.text
    assert client.get("/static/console.js").status_code == 200
    assert client.get("/static/console.css").status_code == 200
    plotly = client.get("/static/plotly.min.js")
    assert plotly.status_code == 200
    assert plotly.content.decode() == plotly_js()  # the reports' bundle, one copy


def test_the_view_shows_the_polled_cluster(client: TestClient) -> None:
    v = client.get("/api/view").json()
    assert [b["id"] for b in v["brokers"]] == [1, 2, 3]
    assert v["topics"][0]["partitions"][0]["isr"] == [1, 2, 3]
    assert v["faults_enabled"] is True
    assert v["console_requests"] >= 3


def test_the_event_stream_sends_the_view(client: TestClient) -> None:
    with client.stream("GET", "/api/events") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        for line in stream.iter_lines():
            if line.startswith("data: "):
                assert [b["id"] for b in json.loads(line[6:])["brokers"]] == [1, 2, 3]
                break


def test_kill_goes_through_the_backend_and_onto_the_timeline(
    client: TestClient, cluster: FakeCluster
) -> None:
    answer = client.post("/api/fault", json={"action": "kill", "broker": 1})
    assert answer.status_code == 200, answer.text
    assert answer.json()["message"] == "broker 1 killed (SIGKILL)"
    assert cluster.calls == [("SIGKILL", 1)]
    v = client.get("/api/view").json()
    texts = [e["text"] for e in v["timeline"]]
    assert "console: kill broker 1" in texts
    assert "t-0: leader broker 2, leader epoch 0" in texts
    assert v["brokers"][0]["process"] == "down"
    restarted = client.post("/api/fault", json={"action": "restart", "broker": 1})
    assert restarted.status_code == 200
    assert cluster.calls[-1] == ("start", 1)


def test_pause_resume_and_shutdown(client: TestClient, cluster: FakeCluster) -> None:
    for action in ("pause", "resume", "shutdown"):
        assert client.post("/api/fault", json={"action": action, "broker": 2}).status_code == 200
    assert cluster.calls == [("pause", 2), ("resume", 2), ("SIGTERM", 2)]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"action": "kill", "broker": 9}, 404, "unknown broker 9 (brokers 1, 2, 3)"),
        ({"action": "explode", "broker": 1}, 400, "unknown action 'explode'"),
        ({"action": "kill", "broker": "1"}, 400, "broker must be a broker id"),
        ({"action": "kill", "broker": True}, 400, "broker must be a broker id"),
        ({"action": "kill"}, 400, "broker must be a broker id (an integer), got None"),
        ({"action": "kill", "broker": 1, "x": 1}, 400, "unknown fields ['x']"),
        ({"action": "restart", "broker": 1}, 409, "broker 1 is already running"),
        ({"action": "resume", "broker": 1}, 409, "broker 1 is not paused"),
        ({"action": "isolate", "broker": 1}, 422, "local processes cannot isolate broker 1"),
        ([1, 2], 400, "the body must be a JSON object, got list"),
    ],
)
def test_a_bad_fault_request_is_refused_and_injects_nothing(
    client: TestClient, cluster: FakeCluster, body: object, status: int, message: str
) -> None:
    answer = client.post("/api/fault", json=body)
    assert answer.status_code == status
    assert message in answer.json()["error"]
    assert cluster.calls == []
    assert not any(e["kind"] == "fault" for e in client.get("/api/view").json()["timeline"])


def test_a_fault_on_a_broker_that_is_down_is_refused(
    client: TestClient, cluster: FakeCluster
) -> None:
    cluster.up[3] = False
    answer = client.post("/api/fault", json={"action": "pause", "broker": 3})
    assert answer.status_code == 409
    assert "broker 3 is not running" in answer.json()["error"]
    assert cluster.calls == []


def test_malformed_json_is_refused(client: TestClient, cluster: FakeCluster) -> None:
    answer = client.post(
        "/api/fault", content=b"{kill", headers={"content-type": "application/json"}
    )
    assert answer.status_code == 400
    assert answer.json()["error"].startswith("malformed JSON body")
    assert cluster.calls == []


def test_a_wrong_method_or_page_is_named(client: TestClient, cluster: FakeCluster) -> None:
    answer = client.get("/api/fault")
    assert answer.status_code == 405
    assert answer.json()["error"] == "GET is not allowed on /api/fault; use POST"
    assert client.delete("/api/view").status_code == 405
    missing = client.get("/api/nothing")
    assert missing.status_code == 404
    assert missing.json()["error"] == "no such page: /api/nothing"
    assert cluster.calls == []


def test_a_console_without_a_backend_refuses_faults() -> None:
    cluster = FakeCluster()
    console = LiveConsole(FakeSource(cluster), Injector(None, lambda k, t: None), lambda: 0)
    with TestClient(create_app(console), base_url="http://127.0.0.1:9021") as c:
        answer = c.post("/api/fault", json={"action": "kill", "broker": 1})
        assert answer.status_code == 409
        assert "no backend to inject faults through" in answer.json()["error"]
        assert c.get("/api/view").json()["faults_enabled"] is False


def _history() -> History:
    h = History()
    for t in (0, 1000, 2000, 3000, 4000):
        lead = 1 if t < 2000 else 2
        epoch = 0 if t < 2000 else 1
        isr = (1, 2) if t < 2000 or t >= 4000 else (2,)
        for b in (1, 2):
            if b == 1 and 2000 <= t < 4000:
                continue  # down: no sample
            h.samples.append(
                ReplicaSample(
                    t, b, "t", 0, b == lead, lead, epoch, t // 100, t // 100 + 3, isr, (1, 2)
                )
            )
    h.faults.append(FaultEvent(1500, "crash", "leader:t/0 → 1", 3500))
    return h


@pytest.fixture
def replay_client() -> Iterator[TestClient]:
    with TestClient(
        create_app(ReplayConsole(Replay(_history()))), base_url="http://127.0.0.1:9021"
    ) as c:
        yield c


def test_replay_steps_through_the_run(replay_client: TestClient) -> None:
    early = replay_client.get("/api/view", params={"t": 1000}).json()
    assert early["replay"] == {"t_ms": 1000, "end_ms": 4000, "frame_ms": 1000, "frames": 5}
    assert early["topics"][0]["partitions"][0]["leader"] == 1
    crashed = replay_client.get("/api/view", params={"t": 2000}).json()
    p = crashed["topics"][0]["partitions"][0]
    assert (p["leader"], p["leader_epoch"], p["isr"]) == (2, 1, [2])
    assert p["under_replicated"]
    assert [b["process"] for b in crashed["brokers"]] == ["down", "up"]
    kinds = [e["kind"] for e in crashed["timeline"]]
    assert "fault" in kinds and "election" in kinds and "isr_shrink" in kinds
    healed = replay_client.get("/api/view", params={"t": 99_000}).json()  # clamped to the end
    assert healed["replay"]["t_ms"] == 4000
    assert healed["topics"][0]["partitions"][0]["isr"] == [1, 2]
    assert healed["verdict"] is None  # no operations recorded: nothing to judge


@pytest.mark.parametrize(
    ("t", "message"), [("soon", "t must be a whole number"), ("-5", "t must be 0 or more")]
)
def test_replay_refuses_a_bad_time(replay_client: TestClient, t: str, message: str) -> None:
    answer = replay_client.get("/api/view", params={"t": t})
    assert answer.status_code == 400
    assert message in answer.json()["error"]


def test_replay_refuses_faults_and_live_events(replay_client: TestClient) -> None:
    answer = replay_client.post("/api/fault", json={"action": "kill", "broker": 1})
    assert answer.status_code == 409
    assert "a replay has no cluster" in answer.json()["error"]
    assert replay_client.get("/api/events").status_code == 409


def test_replay_reads_a_written_history(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    _history().write(path)
    assert Replay(History.read(path)).view_at(2000)["topics"][0]["partitions"][0]["leader"] == 2


@pytest.mark.parametrize(
    ("headers", "status", "message"),
    [
        # A form or text/plain POST is what another site's page can send without a preflight.
        ({"content-type": "text/plain"}, 415, "application/json"),
        ({"content-type": "application/x-www-form-urlencoded"}, 415, "application/json"),
        ({"content-type": "application/json", "origin": "http://evil.example"}, 403, "evil"),
        ({"content-type": "application/json", "host": "rebound.example:9021"}, 403, "Host"),
    ],
)
def test_a_fault_button_answers_the_consoles_own_page_only(
    client: TestClient, cluster: FakeCluster, headers: dict[str, str], status: int, message: str
) -> None:
    body = '{"action": "kill", "broker": 1}'
    answer = client.post("/api/fault", content=body, headers=headers)
    assert answer.status_code == status
    assert message in answer.json()["error"]
    assert cluster.calls == []
    same_origin = {"content-type": "application/json", "origin": "http://127.0.0.1:9021"}
    assert client.post("/api/fault", content=body, headers=same_origin).status_code == 200
    assert cluster.calls == [("SIGKILL", 1)]


def test_the_hosts_a_console_answers_follow_its_bind_address() -> None:
    from kafkasim.console.server import allowed_hosts_for

    assert allowed_hosts_for("0.0.0.0") is None  # every interface: the user chose it
    local = allowed_hosts_for("127.0.0.1")
    assert local is not None and {"127.0.0.1", "localhost"} <= local
    lan = allowed_hosts_for("10.1.2.3")
    assert lan is not None and "10.1.2.3" in lan and "rebound.example" not in lan


def test_a_restarted_broker_is_reported_so_its_pid_goes_on_record(cluster: FakeCluster) -> None:
    """The page's restart starts a new process: the console reports it (the CLI writes its pid
    to the cluster's state file, which 'cluster down' stops by)."""
    started: list[int] = []
    injector = Injector(cluster, lambda kind, text: None, on_started=started.append)

    async def main() -> None:
        await injector.apply("kill", 3)
        assert started == []
        await injector.apply("restart", 3)
        await injector.close()

    asyncio.run(main())
    assert started == [3]
    assert cluster.calls[-1] == ("start", 3)
