"""``kafkasim console --dir`` on a compose cluster's directory: the target and the backend it
builds from the state file, and the docker command each fault button issues, through a fake
command runner that records them (no Docker here)."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from kafkasim.cli import console as console_cli
from kafkasim.cli.console import live_console
from kafkasim.cli.main import main
from kafkasim.cluster.compose import COMPOSE_FILE, ComposeBackend
from kafkasim.cluster.compose_secure import (
    STATE_FILE,
    SecuredCompose,
    attached_cluster,
    default_project,
    state,
)
from kafkasim.console.faults import FaultRefusedError, Injector
from kafkasim.console.live import ComposeTarget
from kafkasim.console.model import DOWN, PAUSED, UNKNOWN, UP

PROJECT = "demo"
PORTS = {1: 19101, 2: 19102, 3: 19103}
KAFKA_PORTS = {1: 29101, 2: 29102, 3: 29103}
METRICS_PORTS = {1: 39101, 2: 39102, 3: 39103}
READS = ("ps", "inspect", "logs")  # docker verbs that change nothing


class FakeDocker:
    """Answers docker's commands for one compose project's containers ``cid-N`` and records
    every command; ``fail``: a verb that fails (as the engine refusing it)."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []
        self.status = dict.fromkeys(PORTS, "running")
        self.ids = {b: f"cid-{b}" for b in PORTS}
        self.fail: str | None = None

    def __call__(
        self, args: list[str], timeout_s: float, env: Mapping[str, str] | None
    ) -> subprocess.CompletedProcess[str]:
        del timeout_s, env
        self.commands.append(args)
        out = self.answer(args[1:])
        if out is None:
            return subprocess.CompletedProcess(args, 1, "", f"Error: {args[1]} refused")
        return subprocess.CompletedProcess(args, 0, out, "")

    def broker(self, container: str) -> int | None:
        return next((b for b, c in self.ids.items() if c == container), None)

    def answer(self, args: list[str]) -> str | None:
        verb = args[0]
        if verb == self.fail:
            return None
        if args == ["compose", "version"]:
            return "Docker Compose version v2"
        if verb == "ps":
            assert f"label=com.docker.compose.project={PROJECT}" in args
            service = args[-1].rpartition("=")[2]
            return self.ids[int(service.removeprefix("broker-"))] + "\n"
        if verb == "inspect":
            template, containers = args[2], args[3:]
            if any(self.broker(c) is None for c in containers):
                return None  # no such container (compose re-created it)
            if template == "{{.Id}} {{.State.Status}}":
                return "".join(f"{c} {self.status[self.broker(c) or 0]}\n" for c in containers)
            return "2024-01-01T00:00:00Z\n"
        if verb == "logs":
            return f"kafkasim broker {self.broker(args[-1])} serving on 0.0.0.0:9093\n"
        changes = {"kill": "exited", "stop": "exited", "start": "running"}
        changes |= {"pause": "paused", "unpause": "running", "network": None}
        if verb not in changes:
            raise AssertionError(f"unexpected docker command {args}")
        broker = self.broker(args[-1])
        assert broker is not None, args
        new = changes[verb]
        if new is not None:
            self.status[broker] = new
        return ""

    def changes(self) -> list[str]:
        """The commands that act on containers, as typed."""
        return [" ".join(c) for c in self.commands if c[1] not in (*READS, "compose")]


def write_state(root: Path, **changes: object) -> None:
    recorded = (
        state(SecuredCompose(root), PORTS, KAFKA_PORTS, METRICS_PORTS, project=PROJECT) | changes
    )
    (root / STATE_FILE).write_text(json.dumps(recorded))


def attach(root: Path, docker: FakeDocker) -> tuple[ComposeTarget, Injector, list[str]]:
    write_state(root)
    console = live_console(root, runner=docker)
    target = console.source.target
    assert isinstance(target, ComposeTarget)
    notes: list[str] = []
    injector = console.injector
    injector.on_event = lambda kind, text: notes.append(text)
    return target, injector, notes


def test_the_console_on_a_compose_state_watches_its_published_ports(tmp_path: Path) -> None:
    docker = FakeDocker()
    target, injector, _ = attach(tmp_path, docker)
    assert target.bootstrap() == [f"127.0.0.1:{PORTS[b]}" for b in (1, 2, 3)]
    assert target.zookeeper is None  # compose/docker-compose.yml does not publish it
    assert target.client_properties == SecuredCompose(tmp_path).client_properties()
    backend = injector.backend
    assert isinstance(backend, ComposeBackend) and backend is target.backend
    assert backend.cluster.project == PROJECT
    assert backend.cluster.files == [str(COMPOSE_FILE), str(SecuredCompose(tmp_path).override)]
    assert backend.broker_ids == (1, 2, 3)
    assert backend.scenario is None
    # Nothing but `docker compose version` until the first poll.
    assert docker.commands == [["docker", "compose", "version"]]
    docker.status[2] = "paused"
    docker.status[3] = "exited"
    asyncio.run(target.refresh())
    brokers = target.brokers()
    assert [(b.broker_id, b.process) for b in brokers] == [(1, UP), (2, PAUSED), (3, DOWN)]
    assert brokers[0].kafka_address == f"127.0.0.1:{KAFKA_PORTS[1]}"
    assert brokers[0].metrics_url == f"http://127.0.0.1:{METRICS_PORTS[1]}/metrics"
    assert injector.paused(2) and not injector.paused(1)
    # Stopping the console leaves the project alone.
    docker.commands.clear()
    backend.stop()
    backend.close()
    assert docker.commands == []


def test_each_button_issues_its_docker_command(tmp_path: Path) -> None:
    docker = FakeDocker()
    _, injector, notes = attach(tmp_path, docker)

    async def press() -> list[str]:
        answers = [
            await injector.apply("kill", 1),
            await injector.apply("restart", 1),
            await injector.apply("pause", 2),
            await injector.apply("resume", 2),
            await injector.apply("pause", 2),
            await injector.apply("shutdown", 2),  # a paused one is unpaused first
            await injector.apply("shutdown", 3),
            await injector.apply("isolate", 1),
            await injector.apply("reconnect", 1),
        ]
        for _ in range(100):  # the restarted broker's serving check runs in a task
            if "broker 1 serving again" in notes:
                break
            await asyncio.sleep(0.01)
        await injector.close()
        return answers

    answers = asyncio.run(press())
    assert answers[0] == "broker 1 killed (SIGKILL)"
    assert answers[1] == "broker 1 started; waiting for it to serve"
    assert docker.changes() == [
        "docker kill --signal SIGKILL cid-1",
        "docker start cid-1",
        "docker pause cid-2",
        "docker unpause cid-2",
        "docker pause cid-2",
        "docker unpause cid-2",
        "docker stop --time 40 cid-2",
        "docker stop --time 40 cid-3",
        "docker network disconnect demo_cluster cid-1",
        "docker network connect --alias broker-1 --alias broker-1.cluster demo_cluster cid-1",
    ]
    assert ["docker", "logs", "--since", "2024-01-01T00:00:00Z", "cid-1"] in docker.commands
    assert "console: kill broker 1" in notes and "broker 1 serving again" in notes


@pytest.mark.parametrize(
    ("action", "broker", "status", "message"),
    [
        ("explode", 1, 400, "unknown action 'explode'"),
        ("kill", "1", 400, "broker must be a broker id"),
        ("kill", True, 400, "broker must be a broker id"),
        ("kill", 7, 404, "unknown broker 7 (brokers 1, 2, 3)"),
    ],
)
def test_a_bad_request_is_refused_before_any_docker_command(
    tmp_path: Path, action: object, broker: object, status: int, message: str
) -> None:
    docker = FakeDocker()
    _, injector, notes = attach(tmp_path, docker)
    docker.commands.clear()
    with pytest.raises(FaultRefusedError, match=re.escape(message)) as refused:
        asyncio.run(injector.apply(action, broker))
    assert refused.value.status == status
    assert docker.commands == [] and notes == []


@pytest.mark.parametrize(
    ("action", "container", "message"),
    [
        ("kill", "exited", "broker 2 is not running (restart it first)"),
        ("restart", "running", "broker 2 is already running"),
        ("pause", "paused", "broker 2 is already paused"),
        ("resume", "running", "broker 2 is not paused"),
        ("reconnect", "running", "broker 2 is not isolated"),
    ],
)
def test_a_button_in_the_wrong_state_reads_the_engine_and_changes_nothing(
    tmp_path: Path, action: str, container: str, message: str
) -> None:
    docker = FakeDocker()
    _, injector, _ = attach(tmp_path, docker)
    docker.status[2] = container  # as `docker ...` by hand left it: the check asks the engine
    with pytest.raises(FaultRefusedError, match=re.escape(message)) as refused:
        asyncio.run(injector.apply(action, 2))
    assert refused.value.status == 409
    assert docker.changes() == []


def test_a_docker_command_that_fails_answers_its_reason(tmp_path: Path) -> None:
    docker = FakeDocker()
    _, injector, notes = attach(tmp_path, docker)
    docker.fail = "pause"
    with pytest.raises(FaultRefusedError, match="pause broker 1 failed: docker pause cid-1") as e:
        asyncio.run(injector.apply("pause", 1))
    assert e.value.status == 502
    assert "refused" in str(e.value) and any("failed" in n for n in notes)
    assert not injector.paused(1)


def test_the_engine_not_answering_shows_the_brokers_unknown(tmp_path: Path) -> None:
    docker = FakeDocker()
    target, _, _ = attach(tmp_path, docker)
    docker.fail = "inspect"
    asyncio.run(target.refresh())
    assert {b.process for b in target.brokers()} == {UNKNOWN}
    assert target.engine_error is not None and "docker inspect" in target.engine_error
    docker.fail = None
    asyncio.run(target.refresh())
    assert {b.process for b in target.brokers()} == {UP}


def test_a_container_compose_recreated_is_looked_up_again(tmp_path: Path) -> None:
    docker = FakeDocker()
    target, _, _ = attach(tmp_path, docker)
    asyncio.run(target.refresh())
    docker.ids[2] = "cid-2-new"
    docker.status[2] = "paused"
    asyncio.run(target.refresh())
    assert target.engine_error is None
    assert [b.process for b in target.brokers()] == [UP, PAUSED, UP]


def test_a_state_without_a_project_takes_composes_default_name() -> None:
    assert default_project({}) == "compose"  # the first file's directory, as compose names it
    assert default_project({"COMPOSE_PROJECT_NAME": "mine"}) == "mine"
    recorded = state(SecuredCompose(Path("/x")), PORTS, KAFKA_PORTS, METRICS_PORTS)
    assert attached_cluster(recorded, "docker compose", FakeDocker()).project == default_project()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"brokers": []}, "names no brokers"),
        ({"brokers": [{"id": "1", "address": "127.0.0.1:1"}]}, "bad broker entry"),
        ({"brokers": [{"id": 1, "address": "127.0.0.1:x"}]}, "address '127.0.0.1:x'"),
        ({"brokers": [{"id": 1}]}, "broker 1: no address"),
        ({"brokers": [{"id": 1, "address": "h:1"}, {"id": 1, "address": "h:2"}]}, "bad broker"),
    ],
)
def test_a_bad_compose_state_is_refused_before_any_docker_command(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    docker = FakeDocker()
    write_state(tmp_path, **changes)
    with pytest.raises(ValueError, match=message):
        live_console(tmp_path, runner=docker)
    assert docker.changes() == []


def test_the_console_refuses_a_compose_cluster_without_compose(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(console_cli, "compose_command", lambda runner: None)
    write_state(tmp_path)
    assert main(["console", "--dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "holds a compose cluster's state" in err and "docker-compose" in err
