"""``cluster.netns`` without touching the host: the commands a broker network runs (recorded by
a fake runner), that it removes exactly what it created (also after a failure half-way), and
that a fault's rules are deleted exactly as they were added."""

from __future__ import annotations

import shutil
import sys

import pytest

from kafkasim.cluster.host_tools import ToolError
from kafkasim.cluster.netns import (
    CAP_NET_ADMIN,
    BrokerNetwork,
    DropRule,
    NetnsError,
    choose_subnet,
    netem_argv,
    netns_enter,
    netns_refusal,
    run_command,
)
from kafkasim.cluster.tmpfs import CAP_SYS_ADMIN


class Recorder:
    """Records every command; fails the one containing ``fail_on`` (once)."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.commands: list[str] = []
        self.fail_on = fail_on

    def __call__(self, argv: list[str]) -> str:
        command = " ".join(argv)
        if self.fail_on is not None and self.fail_on in command:
            self.fail_on = None
            raise NetnsError(f"`{command}` failed: boom")
        self.commands.append(command)
        return ""


def created(recorder: Recorder) -> BrokerNetwork:
    network = BrokerNetwork((2, 1), prefix="ks0a0b0c", subnet=7, run=recorder)
    network.create()
    return network


def test_the_layout_a_bridge_in_a_hub_namespace_and_one_namespace_per_broker() -> None:
    recorder = Recorder()
    network = created(recorder)
    assert network.host_address == "10.231.7.1"
    assert (network.address(1), network.address(2)) == ("10.231.7.11", "10.231.7.12")
    assert network.namespaces == ["ks0a0b0c-hub", "ks0a0b0c-b1", "ks0a0b0c-b2"]
    assert network.host_links == ["ks0a0b0c-h"]
    assert recorder.commands[:8] == [
        "ip netns add ks0a0b0c-hub",
        "ip -n ks0a0b0c-hub link add br0 type bridge",
        "ip -n ks0a0b0c-hub link set br0 up",
        "ip link add ks0a0b0c-h type veth peer name host netns ks0a0b0c-hub",
        "ip -n ks0a0b0c-hub link set host master br0 up",
        "ip addr add 10.231.7.1/24 dev ks0a0b0c-h",
        "ip link set ks0a0b0c-h up",
        "ip netns add ks0a0b0c-b1",
    ]
    assert "ip -n ks0a0b0c-b2 addr add 10.231.7.12/24 dev eth0" in recorder.commands
    assert "ip -n ks0a0b0c-hub link add b2 type veth peer name eth0 netns ks0a0b0c-b2" in (
        recorder.commands
    )
    # A broker runs under ip netns exec, which execs it (its pid stays the broker's).
    assert network.exec_argv(2) == ["ip", "netns", "exec", "ks0a0b0c-b2"]


def test_remove_deletes_exactly_what_was_created_and_only_once() -> None:
    recorder = Recorder()
    network = created(recorder)
    recorder.commands.clear()
    network.remove()
    assert recorder.commands == [
        "ip link del ks0a0b0c-h",
        "ip netns del ks0a0b0c-b2",
        "ip netns del ks0a0b0c-b1",
        "ip netns del ks0a0b0c-hub",
    ]
    recorder.commands.clear()
    network.remove()
    assert recorder.commands == []


def test_a_failure_half_way_removes_what_was_made_so_far() -> None:
    recorder = Recorder(fail_on="ip netns add ks0a0b0c-b2")
    network = BrokerNetwork((1, 2), prefix="ks0a0b0c", subnet=7, run=recorder)
    with pytest.raises(NetnsError, match="boom"):
        network.create()
    deletions = [c for c in recorder.commands if " del " in c]
    assert deletions == [
        "ip link del ks0a0b0c-h",
        "ip netns del ks0a0b0c-b1",
        "ip netns del ks0a0b0c-hub",
    ]
    assert network.namespaces == [] and network.host_links == []


def test_a_removal_that_fails_keeps_the_rest_going_and_what_failed_recorded() -> None:
    recorder = Recorder()
    network = created(recorder)
    recorder.fail_on = "ip netns del ks0a0b0c-b1"
    with pytest.raises(NetnsError, match="ks0a0b0c-b1"):
        network.remove()
    assert "ip netns del ks0a0b0c-hub" in recorder.commands
    assert network.namespaces == ["ks0a0b0c-b1"] and network.host_links == []
    recorder.commands.clear()
    network.remove()  # tried again: only what is left
    assert recorder.commands == ["ip netns del ks0a0b0c-b1"]


def test_isolate_drops_everything_on_eth0_and_reconnect_deletes_the_same_rules() -> None:
    recorder = Recorder()
    network = created(recorder)
    recorder.commands.clear()
    network.isolate(1)
    added = [
        "ip netns exec ks0a0b0c-b1 iptables -w -A INPUT -i eth0 -j DROP",
        "ip netns exec ks0a0b0c-b1 iptables -w -A OUTPUT -o eth0 -j DROP",
    ]
    assert recorder.commands == added
    recorder.commands.clear()
    network.reconnect(1)
    assert recorder.commands == [c.replace(" -A ", " -D ") for c in reversed(added)]
    assert network.rules == {}


def test_isolate_zk_drops_only_zookeepers_address_and_port() -> None:
    recorder = Recorder()
    network = created(recorder)
    recorder.commands.clear()
    network.isolate_zk(2, 2181)
    assert recorder.commands == [
        "ip netns exec ks0a0b0c-b2 iptables -w -A OUTPUT -d 10.231.7.1 -p tcp --dport 2181 -j DROP",
        "ip netns exec ks0a0b0c-b2 iptables -w -A INPUT -s 10.231.7.1 -p tcp --sport 2181 -j DROP",
    ]
    network.reconnect_zk(2)
    assert network.rules == {}


def test_split_drops_the_other_groups_addresses_on_both_sides_and_heals() -> None:
    recorder = Recorder()
    network = BrokerNetwork((1, 2, 3), prefix="ks0a0b0c", subnet=7, run=recorder)
    network.create()
    network.split([[1], [2, 3]])
    rules = network.rules["split"]
    assert rules[:2] == [
        DropRule(netns_enter("ks0a0b0c-b1"), "OUTPUT", ("-d", "10.231.7.12")),
        DropRule(netns_enter("ks0a0b0c-b1"), "INPUT", ("-s", "10.231.7.12")),
    ]
    pairs = {(r.enter[-1][-1], r.match[1][-1]) for r in rules}
    assert pairs == {("1", "2"), ("1", "3"), ("2", "1"), ("3", "1")}
    assert len(rules) == 8
    # A second split replaces the first: its rules deleted before the new ones are added.
    recorder.commands.clear()
    network.split([[1, 2], [3]])
    deleted = [c for c in recorder.commands if " -D " in c]
    assert len(deleted) == 8
    network.heal_split()
    assert network.rules == {}


def test_rules_go_with_the_namespaces_when_removed() -> None:
    recorder = Recorder()
    network = created(recorder)
    network.isolate(1)
    recorder.commands.clear()
    network.remove()
    assert not any("iptables" in c for c in recorder.commands)
    assert network.rules == {}


def test_slow_adds_a_netem_qdisc_per_broker_and_normal_deletes_them() -> None:
    recorder = Recorder()
    network = created(recorder)
    recorder.commands.clear()
    network.slow([1, 2], 50.0, 10.0)
    network.normal()
    assert recorder.commands == [
        "ip netns exec ks0a0b0c-b1 tc qdisc add dev eth0 root netem delay 50ms 10ms",
        "ip netns exec ks0a0b0c-b2 tc qdisc add dev eth0 root netem delay 50ms 10ms",
        "ip netns exec ks0a0b0c-b2 tc qdisc del dev eth0 root",
        "ip netns exec ks0a0b0c-b1 tc qdisc del dev eth0 root",
    ]
    assert netem_argv("lo", 1.0, 0.0) == [
        *("tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms")
    ]


def test_choose_subnet_skips_the_ones_in_use_and_wraps() -> None:
    used = "3: ks1-h inet 10.231.5.1/24 scope global\n10.231.6.0/24 dev ks2-h proto kernel\n"
    assert choose_subnet(used, 5) == 7
    assert choose_subnet(used, 4) == 4
    assert choose_subnet("10.231.254.1/24", 254) == 1
    every = "".join(f"10.231.{x}.1 " for x in range(1, 255))
    with pytest.raises(NetnsError, match="no free"):
        choose_subnet(every, 1)


def test_bad_subnets_and_broker_ids_are_refused() -> None:
    with pytest.raises(ValueError, match=r"subnet must be 1\.\.254"):
        BrokerNetwork((1,), subnet=300)
    with pytest.raises(ValueError, match="broker ids must be"):
        BrokerNetwork((250,))
    with pytest.raises(NetnsError, match="not created yet"):
        _ = BrokerNetwork((1,)).host_address


def test_namespaces_need_root_and_both_capabilities() -> None:
    assert netns_refusal(euid=1000) == (
        "network namespaces need root, and this process runs as uid 1000"
    )
    assert netns_refusal(euid=0, cap_eff=1 << CAP_SYS_ADMIN) == (
        "network namespaces need CAP_NET_ADMIN, which this root process lacks"
    )
    assert netns_refusal(euid=0, cap_eff=0) == (
        "network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN, which this root process lacks"
    )
    both = 1 << CAP_SYS_ADMIN | 1 << CAP_NET_ADMIN
    missing = [tool for tool in ("ip", "iptables") if shutil.which(tool) is None]
    expected = f"network namespaces need {' and '.join(missing)}, not installed here"
    assert netns_refusal(euid=0, cap_eff=both) == (expected if missing else None)


def test_a_failing_command_is_named_with_its_own_error_on_one_line() -> None:
    assert run_command([sys.executable, "-c", "print('out')"]) == "out\n"
    failing = [sys.executable, "-c", "import sys; sys.exit('first\\nsecond')"]
    with pytest.raises(NetnsError) as caught:
        run_command(failing)
    assert str(caught.value).endswith("failed: first second")
    assert isinstance(caught.value.__cause__, ToolError)
    assert caught.value.__cause__.error == "first second"
    with pytest.raises(NetnsError, match="No such file"):
        run_command(["/nonexistent/tool"])
