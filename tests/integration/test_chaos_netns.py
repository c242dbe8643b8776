"""Network faults on local processes as root (``cluster.netns``, ``cluster.root_backend``):
each broker in a network namespace of its own behind a bridge. The catalog's leader-isolation
(``isolate`` of the leader), leader-partition (``split`` of the leader from its followers) and
leader-zk-isolation (``isolate_zk``: the leader cut off ZooKeeper alone), shortened, get the
simulation's verdict on real brokers, and afterwards no namespace, link or mount of the run is
left. ``slow_network`` is refused in one line where the kernel lacks netem (this one does).

Skipped (one line) only when this process cannot create network namespaces; CI runs as root.
"""

from __future__ import annotations

import logging
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kafkasim.cluster.netns import BrokerNetwork, NetnsError, netem_refusal, netns_refusal
from kafkasim.cluster.root_backend import RootLocalBackend, local_root
from kafkasim.cluster.tmpfs import mount_points
from kafkasim.faults import checker, runner
from kafkasim.faults.backend import UnsupportedFaultError, check_supported
from kafkasim.faults.reading import find, load
from kafkasim.sim.backend import SIM
from tests.integration.test_chaos import leader_epochs, needs_zookeeper, shortened, smallest_isr


def needs_namespaces() -> None:
    refusal = netns_refusal()
    if refusal is not None:
        pytest.skip(f"cannot create network namespaces here: {refusal}")


def leftovers(prefix: str) -> list[str]:
    """Namespaces and host links whose name starts with ``prefix``."""
    namespaces = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=False
    ).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=False).stdout
    names = [line.split()[0] for line in namespaces.splitlines() if line.strip()]
    names += [m.group(1) for m in re.finditer(r"^\d+: ([^:@]+)", links, re.MULTILINE)]
    return sorted(n for n in names if n.startswith(prefix))


def test_brokers_reach_each_other_and_the_host_until_a_cut(tmp_path: Path) -> None:
    needs_namespaces()
    network = BrokerNetwork((1, 2))
    listener: subprocess.Popen[bytes] | None = None
    closing: list[socket.socket] = []
    try:
        network.create()
        assert leftovers(network.prefix) == sorted([*network.namespaces, network.host_link])
        host = socket.create_server((network.host_address, 0))
        closing.append(host)
        host_port = host.getsockname()[1]
        # Broker 2's side: a listener in its namespace, as a broker's would be.
        listen = (
            "import socket, sys, time; s = socket.create_server((sys.argv[1], 9092)); "
            "print('up', flush=True); time.sleep(120)"
        )
        listener = subprocess.Popen(
            [*network.exec_argv(2), sys.executable, "-c", listen, network.address(2)],
            stdout=subprocess.PIPE,
        )
        assert listener.stdout is not None and listener.stdout.readline() == b"up\n"

        def reaches(broker_id: int, address: str, port: int) -> bool:
            connect = (
                "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 1)"
            )
            argv = [
                *network.exec_argv(broker_id),
                sys.executable,
                "-c",
                connect,
                address,
                str(port),
            ]
            return subprocess.run(argv, capture_output=True, check=False).returncode == 0

        to_2 = (network.address(2), 9092)
        assert reaches(1, *to_2) and reaches(1, network.host_address, host_port)
        with socket.create_connection(to_2, 1):
            pass  # the host (ZooKeeper's and the clients' side) reaches broker 2
        network.split([[1], [2]])
        assert not reaches(1, *to_2) and reaches(1, network.host_address, host_port)
        network.heal_split()
        network.isolate_zk(1, host_port)
        assert not reaches(1, network.host_address, host_port) and reaches(1, *to_2)
        network.reconnect_zk(1)
        network.isolate(2)
        with pytest.raises(OSError):
            socket.create_connection(to_2, 1)
        assert not reaches(1, *to_2)
        network.reconnect(2)
        assert reaches(1, *to_2) and reaches(1, network.host_address, host_port)
        assert network.rules == {}
    finally:
        for sock in closing:
            sock.close()
        if listener is not None:
            listener.kill()
            listener.wait()
            assert listener.stdout is not None
            listener.stdout.close()
        network.remove()
    assert leftovers(network.prefix) == []


def test_a_failed_creation_leaves_nothing_behind() -> None:
    needs_namespaces()
    # The hub namespace is made, then the host's link is refused: its name is too long.
    network = BrokerNetwork((1, 2), prefix=f"kslong{'x' * 12}")
    with pytest.raises(NetnsError, match=r"ip link add kslongx+-h"):
        network.create()
    assert leftovers(network.prefix) == [] and network.namespaces == []


def test_slow_network_is_refused_in_one_line_where_the_kernel_lacks_netem() -> None:
    needs_namespaces()
    refusal = netem_refusal()
    if refusal is None:
        assert "slow_network" in local_root().injectable
        return
    assert "slow_network" not in local_root().injectable
    with pytest.raises(UnsupportedFaultError) as caught:
        check_supported(load(find("slow-network")), local_root())
    message = str(caught.value)
    assert "\n" not in message
    assert "needs tc netem: tc netem is missing from this kernel (tc: " in message, message


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "at_s", "duration_s"),
    [
        # Cut off at 5 s for 9 s: its session expires (6 s) and a follower is elected.
        ("leader-isolation", 5.0, 9.0),
        # Split from its followers at 5 s for 9 s: it shrinks the ISR (5 s) and keeps leading.
        ("leader-partition", 5.0, 9.0),
        # Cut off ZooKeeper alone at 5 s for 9 s: its session expires, a follower is elected
        # while it still reaches the other brokers.
        ("leader-zk-isolation", 5.0, 9.0),
    ],
)
def test_a_cut_leader_on_real_brokers_agrees_with_the_simulation(
    name: str, at_s: float, duration_s: float, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    needs_namespaces()
    needs_zookeeper()
    caplog.set_level(logging.ERROR)
    chosen = shortened(name, at_s=at_s, duration_s=duration_s)
    made: list[BrokerNetwork] = []
    create = RootLocalBackend._create_network

    def remember(backend: RootLocalBackend) -> None:
        create(backend)
        assert backend.network is not None
        made.append(backend.network)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(RootLocalBackend, "_create_network", remember)
        events: list[str] = []
        history = runner.run(chosen, local_root(), tmp_path / "real", on_event=events.append)
    real = checker.check(history)
    simulated = checker.check(runner.run(chosen, SIM, tmp_path / "sim", seed=1))

    assert real.ok, real.verdict_lines()
    assert (real.verdict, real.lost) == (simulated.verdict, simulated.lost) == ("SAFE", 0)
    assert real.acknowledged > 500 and real.read >= real.acknowledged
    (fault,) = history.faults
    assert fault.action == chosen.faults[0].action
    if name in ("leader-isolation", "leader-zk-isolation"):
        assert len(leader_epochs(history)) >= 2, "no new leader was elected"
    else:
        assert smallest_isr(history) == 1, "the leader never shrank the ISR to itself"
        assert len(leader_epochs(history)) == 1, "a split that keeps ZooKeeper moved the leader"
    assert {broker for _, _, broker in history.final_logs} == {1, 2, 3}
    # Nothing of the run is left: namespaces, the host's link (rules go with the namespaces)
    # and the tmpfs mounts.
    (network,) = made
    assert leftovers(network.prefix) == []
    root = str(tmp_path.resolve())
    assert [m for m in mount_points() if m.startswith(root)] == []
