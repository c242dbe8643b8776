"""``cluster.container_net`` without an engine: the iptables commands a compose project's link
faults run inside the brokers' namespaces (recorded by a fake runner), that healing deletes
exactly what was added, that a container started again (a new namespace, maybe a new address)
gets the rules of the faults in force, and what the compose backend refuses and why."""

from __future__ import annotations

import asyncio
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from kafkasim.cluster import compose, container_net
from kafkasim.cluster.chaos import ChaosError, ProcessBackend
from kafkasim.cluster.compose import ComposeBackend, ComposeCluster
from kafkasim.cluster.container_net import (
    ContainerNetwork,
    Where,
    delay_refusal,
    filtering_refusal,
    locate,
)
from kafkasim.faults.backend import UnsupportedFaultError, check_supported, unsupported_faults
from kafkasim.faults.reading import find, load
from kafkasim.faults.scenario import Fault

NS = {1: "nsenter --net=/proc/101/ns/net", 2: "nsenter --net=/proc/102/ns/net"}
NS[3] = "nsenter --net=/proc/103/ns/net"


class Layout:
    """The containers as a fake engine has them: pids (0: stopped), cluster addresses."""

    def __init__(self) -> None:
        self.pids = {1: 101, 2: 102, 3: 103}
        self.addresses = {1: "172.30.0.11", 2: "172.30.0.12", 3: "172.30.0.13"}
        self.zookeeper: str | None = "172.30.0.2"

    def __call__(self) -> Where:
        return Where(
            {b: container_net.nsenter(pid) for b, pid in self.pids.items() if pid},
            {b: ip for b, ip in self.addresses.items() if self.pids[b]},
            self.zookeeper,
        )


class Recorder:
    def __init__(self) -> None:
        self.commands: list[str] = []

    def __call__(self, argv: list[str]) -> str:
        self.commands.append(" ".join(argv))
        return ""


def network() -> tuple[ContainerNetwork, Layout, Recorder]:
    layout, recorder = Layout(), Recorder()
    return ContainerNetwork(layout, run=recorder), layout, recorder


def deleted(added: list[str]) -> list[str]:
    return [c.replace(" -A ", " -D ") for c in reversed(added)]


def test_a_split_drops_the_other_sides_cluster_addresses_in_each_namespace_and_heals() -> None:
    net, _, recorder = network()
    net.split([[1], [2, 3]])
    added = [
        f"{NS[1]} iptables -w -A OUTPUT -d 172.30.0.12 -j DROP",
        f"{NS[1]} iptables -w -A INPUT -s 172.30.0.12 -j DROP",
        f"{NS[1]} iptables -w -A OUTPUT -d 172.30.0.13 -j DROP",
        f"{NS[1]} iptables -w -A INPUT -s 172.30.0.13 -j DROP",
        f"{NS[2]} iptables -w -A OUTPUT -d 172.30.0.11 -j DROP",
        f"{NS[2]} iptables -w -A INPUT -s 172.30.0.11 -j DROP",
        f"{NS[3]} iptables -w -A OUTPUT -d 172.30.0.11 -j DROP",
        f"{NS[3]} iptables -w -A INPUT -s 172.30.0.11 -j DROP",
    ]
    assert recorder.commands == added
    assert net.in_force == ("split",)
    recorder.commands.clear()
    net.heal_split()
    assert recorder.commands == deleted(added)
    assert net.rules == {} and net.in_force == ()


def test_isolate_zk_drops_zookeepers_address_and_port_only() -> None:
    net, _, recorder = network()
    net.isolate_zk(2)
    added = [
        f"{NS[2]} iptables -w -A OUTPUT -d 172.30.0.2 -p tcp --dport 2181 -j DROP",
        f"{NS[2]} iptables -w -A INPUT -s 172.30.0.2 -p tcp --sport 2181 -j DROP",
    ]
    assert recorder.commands == added
    recorder.commands.clear()
    net.reconnect_zk(2)
    assert recorder.commands == deleted(added)


def test_a_one_way_cut_drops_what_src_sends_dst_and_counts_overlapping_cuts() -> None:
    net, _, recorder = network()
    net.cut_one_way(1, 3)
    net.cut_one_way(1, 3)  # a second fault on the same link: no second rule
    assert recorder.commands == [f"{NS[1]} iptables -w -A OUTPUT -d 172.30.0.13 -j DROP"]
    net.heal_one_way(1, 3)  # one of the two healed: still cut
    assert len(recorder.commands) == 1
    net.heal_one_way(1, 3)
    assert recorder.commands[1:] == [f"{NS[1]} iptables -w -D OUTPUT -d 172.30.0.13 -j DROP"]
    with pytest.raises(ValueError, match="cut from itself"):
        net.cut_one_way(2, 2)


def test_a_restarted_container_gets_the_rules_of_the_faults_in_force() -> None:
    net, layout, recorder = network()
    net.split([[2], [1, 3]])
    net.isolate_zk(2)
    # Broker 2 killed: its namespace goes, and its rules with it.
    layout.pids[2] = 0
    recorder.commands.clear()
    net.heal_split()  # healed while it is down: nothing tried in the namespace that is gone
    assert recorder.commands == [
        f"{NS[3]} iptables -w -D INPUT -s 172.30.0.12 -j DROP",
        f"{NS[3]} iptables -w -D OUTPUT -d 172.30.0.12 -j DROP",
        f"{NS[1]} iptables -w -D INPUT -s 172.30.0.12 -j DROP",
        f"{NS[1]} iptables -w -D OUTPUT -d 172.30.0.12 -j DROP",
    ]
    assert net.in_force == ("isolate_zk:2",) and net.rules["isolate_zk:2"] == []
    # Started again: a new namespace (pid 202), a new address; the ZooKeeper cut laid again.
    layout.pids[2], layout.addresses[2] = 202, "172.30.0.22"
    recorder.commands.clear()
    net.refresh()
    assert recorder.commands == [
        "nsenter --net=/proc/202/ns/net iptables -w -A OUTPUT -d 172.30.0.2 -p tcp --dport 2181 "
        "-j DROP",
        "nsenter --net=/proc/202/ns/net iptables -w -A INPUT -s 172.30.0.2 -p tcp --sport 2181 "
        "-j DROP",
    ]


def test_a_split_laid_while_a_broker_is_down_reaches_it_when_it_starts() -> None:
    net, layout, recorder = network()
    layout.pids[3] = 0
    net.split([[1], [2, 3]])
    assert not any("172.30.0.13" in c or NS[3] in c for c in recorder.commands)
    assert len(recorder.commands) == 4  # 1 <-> 2 only
    layout.pids[3], layout.addresses[3] = 303, "172.30.0.33"
    recorder.commands.clear()
    net.refresh()
    removed = [c for c in recorder.commands if " -D " in c]
    readded = [c for c in recorder.commands if " -A " in c]
    assert len(removed) == 4 and len(readded) == 8
    assert f"{NS[1]} iptables -w -A OUTPUT -d 172.30.0.33 -j DROP" in readded
    assert "nsenter --net=/proc/303/ns/net iptables -w -A INPUT -s 172.30.0.11 -j DROP" in readded
    assert len(net.rules["split"]) == 8


def test_remove_deletes_every_rule_in_force_and_refresh_without_faults_runs_nothing() -> None:
    net, layout, recorder = network()
    net.refresh()
    assert recorder.commands == []
    net.cut_one_way(2, 1)
    net.isolate_zk(1)
    layout.pids[1] = 0  # gone with its container: nothing to delete there
    recorder.commands.clear()
    net.remove()
    assert recorder.commands == [f"{NS[2]} iptables -w -D OUTPUT -d 172.30.0.11 -j DROP"]
    assert net.rules == {} and net.in_force == ()
    layout.pids[1] = 111
    net.cut_one_way(2, 1)  # the count went with remove: a new cut lays its rule
    assert recorder.commands[-1] == f"{NS[2]} iptables -w -A OUTPUT -d 172.30.0.11 -j DROP"


# -- the engine's answers --------------------------------------------------------------------


class FakeDocker:
    """Answers the docker calls of ``locate`` and the backend's start/kill; records them."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.pids = {"c1": 101, "c2": 102, "c3": 103}
        self.addresses = {"c1": "172.30.0.11", "c2": "172.30.0.12", "c3": "172.30.0.13"}

    def __call__(
        self, args: list[str], timeout_s: float, env: Mapping[str, str] | None
    ) -> subprocess.CompletedProcess[str]:
        del timeout_s, env
        self.calls.append(args)
        out = ""
        if args[1] == "ps":
            service = args[-1].rsplit("=", 1)[1]
            out = "zk\n" if service == "zookeeper" else f"c{service[-1]}\n"
        elif args[1] == "inspect" and "{{.State.Pid}}" in args[3]:
            assert 'eq $name "proj_cluster"' in args[3]
            lines = [f"{c} {self.pids[c]} {self.addresses[c]}" for c in args[4:] if c != "zk"]
            out = "\n".join([*lines, "zk 99 172.30.0.2"]) + "\n"
        elif args[1] == "inspect":
            out = "2026-01-01T00:00:00Z\n"
        elif args[1] == "kill":
            self.pids[args[-1]] = 0
        elif args[1] == "start":
            self.pids[args[-1]] = 500 + int(args[-1][1])
        return subprocess.CompletedProcess(args, 0, out, "")


def fake_cluster(docker: FakeDocker) -> ComposeCluster:
    return ComposeCluster(
        "docker compose",
        [],
        "proj",
        {1: 1, 2: 2, 3: 3},
        {},
        remember_containers=True,
        runner=docker,
    )


def test_locate_reads_pids_and_cluster_addresses_from_one_inspect() -> None:
    docker = FakeDocker()
    docker.pids["c2"], docker.addresses["c3"] = 0, ""
    where = locate(fake_cluster(docker))
    assert where.enter == {1: ("nsenter", "--net=/proc/101/ns/net"), 3: tuple(NS[3].split())}
    assert dict(where.address) == {1: "172.30.0.11", 2: "172.30.0.12"}
    assert where.zookeeper == "172.30.0.2"


def test_the_compose_backend_lays_the_split_again_in_a_restarted_containers_namespace(
    tmp_path: Path,
) -> None:
    docker = FakeDocker()
    backend = ComposeBackend.over(fake_cluster(docker), tmp_path)
    recorder = Recorder()
    backend.network = ContainerNetwork(lambda: locate(backend.cluster), run=recorder)
    backend.split([[1], [2, 3]])
    assert len(recorder.commands) == 8
    backend.kill(1, signal.SIGKILL)
    backend.start_broker(1)  # pid 501 now
    fresh = [c for c in recorder.commands[8:] if c.startswith("nsenter --net=/proc/501/")]
    assert fresh == [
        "nsenter --net=/proc/501/ns/net iptables -w -A OUTPUT -d 172.30.0.12 -j DROP",
        "nsenter --net=/proc/501/ns/net iptables -w -A INPUT -s 172.30.0.12 -j DROP",
        "nsenter --net=/proc/501/ns/net iptables -w -A OUTPUT -d 172.30.0.13 -j DROP",
        "nsenter --net=/proc/501/ns/net iptables -w -A INPUT -s 172.30.0.13 -j DROP",
    ]
    assert not any("/proc/101/" in c for c in recorder.commands[8:])  # its old namespace
    recorder.commands.clear()
    backend.close()  # a project not ours: the rules go, the project stays
    assert len(recorder.commands) == 8 and all(" -D " in c for c in recorder.commands)
    assert not any(args[1:2] == ["compose"] or "down" in args for args in docker.calls)


def test_the_runner_reaches_the_one_way_cut_where_it_is_injectable(tmp_path: Path) -> None:
    docker = FakeDocker()
    backend = ComposeBackend.over(fake_cluster(docker), tmp_path)
    recorder = Recorder()
    backend.network = ContainerNetwork(lambda: locate(backend.cluster), run=recorder)
    scenario = load(find("follower-one-way"))
    process = ProcessBackend(scenario, backend)
    if "partition_one_way" not in process.spec.injectable:
        with pytest.raises(UnsupportedFaultError, match="cannot inject partition_one_way"):
            asyncio.run(process.cut_one_way(2, 1))
        return
    asyncio.run(process.cut_one_way(2, 1))
    asyncio.run(process.heal_one_way(2, 1))
    assert recorder.commands == [
        f"{NS[2]} iptables -w -A OUTPUT -d 172.30.0.11 -j DROP",
        f"{NS[2]} iptables -w -D OUTPUT -d 172.30.0.11 -j DROP",
    ]


# -- what is refused, and why ----------------------------------------------------------------


NO_ROOT = "network namespaces need root, and this process runs as uid 1000"
NO_NETEM = (
    "delaying a container's traffic needs tc netem in the host's kernel: tc netem is missing "
    "from this kernel (tc: Error: Specified qdisc kind is unknown.)"
)


def test_as_root_the_link_faults_are_injected_and_the_delays_refused_for_the_kernel() -> None:
    spec = compose.compose_spec_for(None, NO_NETEM)
    assert {"split", "isolate_zk", "partition_one_way", "isolate"} <= spec.injectable
    assert spec.not_injectable["slow_network"] == NO_NETEM
    assert spec.not_injectable["slow_one_way"] == NO_NETEM
    chosen = load(find("leader-partition"))
    check_supported(chosen, spec)
    slow = replace(
        chosen, faults=(Fault(1.0, "slow_network", "broker:1", 1.0, {"latency_ms": 5.0}),)
    )
    (clause,) = unsupported_faults(slow, spec)
    assert clause == f"slow_network (faults[0]): {NO_NETEM}"


def test_without_root_the_link_faults_are_refused_saying_why_in_one_line() -> None:
    spec = compose.compose_spec_for(NO_ROOT, NO_NETEM)
    assert spec.injectable.isdisjoint({"split", "isolate_zk", "partition_one_way"})
    with pytest.raises(UnsupportedFaultError) as caught:
        check_supported(load(find("leader-partition")), spec)
    message = str(caught.value)
    assert "\n" not in message
    assert (
        "split (faults[0]): cutting links inside the containers needs nsenter and iptables: "
        + NO_ROOT
    ) in message


def test_the_delay_refusal_is_the_kernels_netem_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(container_net, "netem_refusal", lambda: "tc netem is missing here")
    assert delay_refusal() == (
        "delaying a container's traffic needs tc netem in the host's kernel: "
        "tc netem is missing here"
    )
    net = ComposeBackend.over(fake_cluster(FakeDocker()), Path("/nonexistent"))
    with pytest.raises(ChaosError, match="containers cannot be slowed: delaying"):
        net.slow_network([1], 5.0, 0.0)


def test_filtering_needs_root_and_nsenter(monkeypatch: pytest.MonkeyPatch) -> None:
    assert filtering_refusal(euid=1000) == NO_ROOT
    monkeypatch.setattr(container_net.shutil, "which", lambda tool: None)
    assert filtering_refusal(euid=0, cap_eff=-1) == (
        "network namespaces need ip and iptables, not installed here"
    )
    monkeypatch.setattr(
        container_net.shutil, "which", lambda tool: None if tool == "nsenter" else "/bin/x"
    )
    assert filtering_refusal(euid=0, cap_eff=-1) == (
        "entering a container's namespace needs nsenter (util-linux), not installed here"
    )
