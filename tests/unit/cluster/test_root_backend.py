"""The root backend's spec (``cluster.root_backend``) and when ``cluster.tmpfs`` may mount:
``disk_full`` is injectable only where this process may mount a tmpfs, the network faults only
where it may create network namespaces (``slow_network`` only where netem is there too), else
each is refused before anything starts in one line saying why; everything else as on
``LOCAL``."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkasim.cluster import chaos, root_backend
from kafkasim.cluster.netns import BrokerNetwork, netns_refusal
from kafkasim.cluster.root_backend import (
    NETWORK_ACTIONS,
    ROOT_RUNTIME,
    NetnsCluster,
    RootLocalBackend,
    local_root_spec,
)
from kafkasim.cluster.tmpfs import CAP_SYS_ADMIN, mount_points, mount_refusal
from kafkasim.faults.backend import UnsupportedFaultError, check_supported
from kafkasim.faults.reading import find, load

NOT_ROOT = mount_refusal(euid=1000)
NO_NETNS = netns_refusal(euid=1000)
NO_NETEM = "tc netem is missing from this kernel (tc: unknown qdisc)"


def test_mounting_needs_root_and_cap_sys_admin() -> None:
    assert NOT_ROOT == "mounting a tmpfs needs root, and this process runs as uid 1000"
    assert mount_refusal(euid=0, cap_eff=0) == (
        "mounting a tmpfs needs CAP_SYS_ADMIN, which this root process lacks"
    )
    everything_but_sys_admin = ((1 << 41) - 1) & ~(1 << CAP_SYS_ADMIN)
    assert mount_refusal(euid=0, cap_eff=everything_but_sys_admin) is not None
    assert mount_refusal(euid=0, cap_eff=1 << CAP_SYS_ADMIN) is None


def test_without_root_a_full_disk_is_refused_in_one_line() -> None:
    spec = local_root_spec(NOT_ROOT, NO_NETNS)
    assert spec.injectable == chaos.INJECTABLE
    with pytest.raises(UnsupportedFaultError) as caught:
        check_supported(load(find("leader-disk-full")), spec)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"scenario leader-disk-full: {ROOT_RUNTIME} cannot inject")
    assert "disk_full (faults[0])" in message
    assert "needs root, and this process runs as uid 1000" in message
    check_supported(load(find("leader-crash")), spec)  # what LOCAL injects, it injects


def test_as_root_a_full_disk_and_cut_links_are_injectable_and_the_rest_as_on_local() -> None:
    spec = local_root_spec(None, None, NO_NETEM)
    assert spec.name == "local-root" and spec.runtime == ROOT_RUNTIME
    root_actions = NETWORK_ACTIONS | {"disk_full"}
    assert spec.injectable == chaos.INJECTABLE | root_actions
    assert dict(spec.not_injectable) == {
        a: why for a, why in chaos.NOT_INJECTABLE.items() if a not in root_actions
    } | {"slow_network": f"delaying links needs tc netem: {NO_NETEM}"}
    for name in ("leader-disk-full", "leader-isolation", "leader-partition"):
        check_supported(load(find(name)), spec)
    with pytest.raises(UnsupportedFaultError) as caught:
        check_supported(load(find("slow-network")), spec)
    assert "\n" not in str(caught.value) and "missing from this kernel" in str(caught.value)
    assert "slow_network" in local_root_spec(None, None, None).injectable


def test_without_namespaces_the_network_faults_are_refused_saying_why() -> None:
    spec = local_root_spec(None, NO_NETNS, None)
    assert spec.injectable == chaos.INJECTABLE | {"disk_full"}
    with pytest.raises(UnsupportedFaultError) as caught:
        check_supported(load(find("leader-isolation")), spec)
    message = str(caught.value)
    assert "\n" not in message
    assert "needs each broker in a network namespace: network namespaces need root" in message
    assert spec.not_injectable["slow_network"].endswith("this process runs as uid 1000")


def test_even_as_root_a_slow_disk_is_refused_in_one_line_naming_dm_delay() -> None:
    spec = local_root_spec(None, None, None)
    assert "slow_disk" not in spec.injectable
    with pytest.raises(UnsupportedFaultError) as caught:
        check_supported(load(find("slow-disk")), spec)
    message = str(caught.value)
    assert "\n" not in message and "slow_disk (faults[0])" in message
    assert "dm-delay" in message


def test_local_refuses_a_full_disk_naming_the_root_backend() -> None:
    """``LOCAL`` is unchanged: it never mounts, even as root, and says where it can be done."""
    assert "disk_full" not in chaos.LOCAL.injectable
    assert "local-root" in chaos.NOT_INJECTABLE["disk_full"]
    with pytest.raises(chaos.ChaosError, match="cannot fill broker 1's disk"):
        chaos.LocalBackend(load(find("leader-disk-full")), Path("/nonexistent")).fill_disk(1)


def test_closing_a_backend_that_never_started_mounts_nothing(tmp_path: Path) -> None:
    backend = RootLocalBackend(load(find("leader-disk-full")), tmp_path / "run")
    before = mount_points()
    backend.close()
    assert backend.mounts == () and mount_points() == before


def test_brokers_in_namespaces_run_under_ip_netns_exec_on_their_namespace_address(
    tmp_path: Path,
) -> None:
    """What ``RootLocalBackend`` sets up once the namespaces exist (here recorded, not made):
    each broker's command runs in its namespace, its listeners bind and advertise the
    namespace's address, and ZooKeeper listens on the host's end of the bridge."""
    backend = RootLocalBackend(load(find("leader-isolation")), tmp_path / "run")
    commands: list[str] = []

    def record(argv: list[str]) -> str:
        commands.append(" ".join(argv))
        return ""

    network = BrokerNetwork(backend.broker_ids, prefix="ks0a0b0c", subnet=9, run=record)
    cluster = backend.cluster
    assert isinstance(cluster, NetnsCluster)
    assert cluster.broker_argv(cluster.brokers[2])[:3] != ["ip", "netns", "exec"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(root_backend, "BrokerNetwork", lambda _ids: network)
        backend._create_network()
    broker = cluster.brokers[2]
    assert cluster.broker_argv(broker)[:4] == ["ip", "netns", "exec", "ks0a0b0c-b2"]
    assert broker.address == f"10.231.9.12:{broker.port}"
    assert cluster.zookeeper.connect_string == f"10.231.9.1:{cluster.zookeeper.port}"
    cluster._write_config(broker)
    config = broker.config_path.read_text()
    assert f"listeners=PLAINTEXT://10.231.9.12:{broker.port},KAFKA://10.231.9.12:" in config
    assert "zookeeper.connect=10.231.9.1:" in config
    assert backend.network is network and "ip netns add ks0a0b0c-b3" in commands
    backend.close()  # nothing started: only the namespaces recorded above are removed
    assert backend.network is None
    assert commands[-1] == "ip netns del ks0a0b0c-hub"
