"""The command line's cluster verbs and the main job, run as a user runs them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from kafkasim.controller.zk_process import zookeeper_available
from tests.cli_run import ROOT, kafkasim


@pytest.fixture(autouse=True)
def _needs_zookeeper() -> None:
    reason = zookeeper_available()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and Path(f"/proc/{pid}/cmdline").read_bytes() != b""


def _printed_bootstrap(stdout: str, audience: str) -> str:
    found = re.search(rf"bootstrap\.servers \({audience}[^)]*\)\s+(\S+)", stdout)
    assert found is not None, stdout
    return found.group(1)


def _listening_addresses(pid: int) -> set[str]:
    """``host:port`` of every TCP socket ``pid`` listens on (its fds, looked up in the
    kernel's socket tables)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: LISTEN
                continue
            hex_host, hex_port = local.split(":")
            raw = bytes.fromhex(hex_host[:width])
            if width == 8:
                host = ".".join(str(b) for b in reversed(raw))
            else:  # IPv6 as four little-endian 32-bit words
                ordered = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                groups = (ordered[i : i + 2].hex() for i in range(0, 16, 2))
                host = "[" + ":".join(groups) + "]"
                if ordered[:12] == bytes(10) + b"\xff\xff":  # IPv4-mapped (Java's sockets)
                    host = ".".join(str(b) for b in ordered[12:])
            found.add(f"{host}:{int(hex_port, 16)}")
    return found


def test_cluster_up_status_down(tmp_path: Path) -> None:
    root = tmp_path / "c"
    up = kafkasim("cluster", "up", "--brokers", "3", "--dir", str(root))
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((root / "cluster.json").read_text())
        pids = [b["pid"] for b in state["brokers"]] + [state["zookeeper"]["pid"]]
        assert all(_alive(pid) for pid in pids)
        grpc = {b["id"]: b["address"] for b in state["brokers"]}
        kafka = {b["id"]: b["kafka_address"] for b in state["brokers"]}
        assert _printed_bootstrap(up.stdout, "kafkasim tools") == ",".join(grpc.values())
        kafka_bootstrap = _printed_bootstrap(up.stdout, "Kafka clients")
        assert kafka_bootstrap == ",".join(kafka.values())
        # A Kafka client on the printed string sees every broker by its Kafka listener.
        metadata = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=30)
        assert {b.id: f"{b.host}:{b.port}" for b in metadata.brokers.values()} == kafka
        again = kafkasim("cluster", "up", "--dir", str(root))
        assert again.returncode == 1
        assert "already running" in again.stderr and again.stderr.count("\n") == 1
        status = kafkasim("cluster", "status", "--dir", str(root))
        assert status.returncode == 0, status.stderr
        assert status.stdout.count("registered process up") == 3
        metrics = {b["id"]: b["metrics"] for b in state["brokers"]}
        assert len(set(metrics.values())) == 3
        for broker_id, address in grpc.items():
            line = (
                f"  {broker_id}  gRPC {address}  Kafka {kafka[broker_id]}  "
                f"metrics {metrics[broker_id]}  registered"
            )
            assert line in status.stdout
            assert f"metrics {metrics[broker_id]}" in up.stdout
        assert "Controller: broker" in status.stdout
        # Safe by default: every socket the brokers and ZooKeeper listen on is on loopback.
        for pid in pids:
            listening = _listening_addresses(pid)
            assert listening, pid
            assert all(a.startswith("127.0.0.1:") for a in listening), (pid, listening)
    finally:
        down = kafkasim("cluster", "down", "--dir", str(root))
    assert down.returncode == 0, down.stderr
    assert not any(_alive(pid) for pid in pids)
    assert not (root / "cluster.json").exists()
    assert kafkasim("cluster", "status", "--dir", str(root)).returncode == 1


def _status_line(root: Path, broker_id: int) -> str:
    status = kafkasim("cluster", "status", "--dir", str(root))
    assert status.returncode == 0, status.stderr
    return next(line for line in status.stdout.splitlines() if line.startswith(f"  {broker_id}  "))


def test_one_broker_of_a_running_cluster_is_paused_killed_started_and_its_log_read(
    tmp_path: Path,
) -> None:
    """kafkasim cluster pause|resume|kill|start|stop --broker N and logs, as a user runs them:
    status follows, the metrics endpoint answers, a restarted broker is recorded and stopped
    by down."""
    root = tmp_path / "c"
    up = kafkasim("cluster", "up", "--brokers", "2", "--dir", str(root))
    pids: list[int] = []
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        state = json.loads((root / "cluster.json").read_text())
        pids = [b["pid"] for b in state["brokers"]] + [state["zookeeper"]["pid"]]
        with urllib.request.urlopen(state["brokers"][1]["metrics"], timeout=30) as response:
            body = response.read()
        assert b"kafka_server_replicamanager_partitioncount" in body
        # `kafkasim broker` runs on a timed loop: its idle fraction is exported (0 to 1).
        idle = re.search(
            rb"^kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent (\S+)$",
            body,
            re.MULTILINE,
        )
        assert idle is not None and 0.0 <= float(idle.group(1)) <= 1.0
        d = ("--dir", str(root))
        paused = kafkasim("cluster", "pause", "--broker", "2", *d)
        assert paused.returncode == 0, paused.stderr
        assert paused.stdout == f"broker 2 paused (pid {pids[1]})\n"
        assert _status_line(root, 2).endswith("process paused")
        again = kafkasim("cluster", "pause", "--broker", "2", *d)
        assert again.returncode == 1
        assert again.stderr == "kafkasim cluster: error: broker 2 is already paused\n"
        assert kafkasim("cluster", "resume", "--broker", "2", *d).returncode == 0
        assert _status_line(root, 2).endswith("process up")
        killed = kafkasim("cluster", "kill", "--broker", "2", *d)
        assert killed.stdout == f"broker 2 killed (pid {pids[1]})\n"
        assert not _alive(pids[1])
        assert _status_line(root, 2).endswith("process down")
        stopped = kafkasim("cluster", "stop", "--broker", "2", *d)
        assert stopped.returncode == 1
        assert "broker 2 is not running (start it with 'kafkasim cluster start')" in stopped.stderr
        started = kafkasim("cluster", "start", "--broker", "2", *d)
        assert started.returncode == 0, started.stderr
        restarted = json.loads((root / "cluster.json").read_text())["brokers"][1]["pid"]
        assert restarted != pids[1] and _alive(restarted)
        pids.append(restarted)
        assert f"broker 2 started (pid {restarted}), serving after" in started.stdout
        assert _status_line(root, 2).endswith("registered process up")
        logs = kafkasim("cluster", "logs", "--broker", "2", "--tail", "2", *d)
        assert logs.returncode == 0, logs.stderr
        assert logs.stdout.splitlines()[-2:] == [
            f"kafkasim broker 2 serving on {state['brokers'][1]['address']}",
            f"kafkasim broker 2 metrics on {state['brokers'][1]['metrics']}",
        ]
        unknown = kafkasim("cluster", "kill", "--broker", "7", *d)
        assert unknown.returncode == 1
        assert f"no broker 7 in the cluster in {root} (brokers 1, 2)" in unknown.stderr
        follow = subprocess.Popen(
            [sys.executable, "-m", "kafkasim.cli", "cluster", "logs", "--broker", "1", "-f", *d],
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=ROOT,
        )
        try:
            assert follow.stdout is not None
            stop = kafkasim("cluster", "stop", "--broker", "1", *d)
            assert stop.returncode == 0, stop.stderr
            # -f prints what the broker writes as it stops (its controlled shutdown).
            seen = b""
            while b"shutdown" not in seen:
                line = follow.stdout.readline()
                assert line, seen
                seen += line
        finally:
            follow.terminate()
            follow.wait(timeout=30)
            if follow.stdout is not None:
                follow.stdout.close()
    finally:
        down = kafkasim("cluster", "down", "--dir", str(root))
    assert down.returncode == 0, down.stderr
    assert not any(_alive(pid) for pid in pids)


def test_main_job_demo_ends_with_the_expected_verdicts(tmp_path: Path) -> None:
    """The README's main command, shortened: acks=all loses nothing, acks=1 loses some."""
    out = kafkasim("demo", "cluster", "--quick", "--dir", str(tmp_path), timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = {
        line.split(":")[0].strip(): line
        for line in out.stdout.splitlines()
        if line.startswith("verdict")
    }
    acks_all, acks_1 = lines["verdict acks=all"], lines["verdict acks=1"]
    assert "lost 0," in acks_all and "duplicated 0" in acks_all
    assert "lost 0," not in acks_1
    # What the narration says the leader acknowledged alone is what the verdict finds lost.
    alone = re.search(r"the leader acknowledged (\d+) more records alone", out.stdout)
    assert alone is not None, out.stdout
    assert f"lost {alone.group(1)}," in acks_1
    assert f"acks=1 lost {alone.group(1)} acknowledged records: the {alone.group(1)} " in out.stdout
    assert "lost nothing acknowledged" in out.stdout
    assert "SIGKILL the leader" in out.stdout and "back in the ISR" in out.stdout


def test_a_terminated_demo_stops_what_it_started(tmp_path: Path) -> None:
    """SIGTERM (``timeout``, a service manager) stops the demo's ZooKeeper and brokers too."""
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kafkasim.cli",
            "demo",
            "cluster",
            "--quick",
            "--dir",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    )
    try:
        assert demo.stdout is not None
        started: list[str] = []
        for line in demo.stdout:
            started.append(line)
            if "acks=all: topic" in line:  # the cluster is up and the demo at work
                break
        assert len(started) >= 4 and _processes_under(tmp_path), "".join(started)
        demo.terminate()
        _, err = demo.communicate(timeout=90)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode != 0
    assert "Traceback" not in err, err
    assert _processes_under(tmp_path) == [], err


def _processes_under(root: Path) -> list[int]:
    """Pids of the processes whose command line names ``root`` (what `cluster up` started)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(root) in cmdline:
                found.append(int(proc.name))
    return found


def test_a_failed_cluster_up_says_the_brokers_own_error_in_one_line(tmp_path: Path) -> None:
    root = tmp_path / "c"
    up = kafkasim(
        "cluster", "up", "--brokers", "2", "--dir", str(root),
        "--override", "log.retention.hourz=3",
    )  # fmt: skip
    assert up.returncode == 1
    assert up.stderr.count("\n") == 1, up.stderr
    assert "INVALID_CONFIG: Unknown broker configuration key: log.retention.hourz" in up.stderr
    # A config error is not a lost port: no retries.
    assert "retrying" not in up.stderr and "Traceback" not in up.stderr
    assert str(root / "broker-1" / "broker.log") in up.stderr
    assert not (root / "cluster.json").exists()
    assert _processes_under(root) == []


def test_a_port_clash_names_the_address(tmp_path: Path) -> None:
    import socket

    root = tmp_path / "c"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        up = kafkasim(
            "cluster", "up", "--brokers", "1", "--dir", str(root),
            "--override", f"listeners=PLAINTEXT://{address}",
        )  # fmt: skip
    assert up.returncode == 1
    assert up.stderr.count("\n") == 1, up.stderr
    assert f"Socket server failed to bind to {address}: Address already in use." in up.stderr
    assert "retrying" not in up.stderr
    assert _processes_under(root) == []
