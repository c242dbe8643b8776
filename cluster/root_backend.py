"""Failure runs on local processes with the faults that need root (``LOCAL_ROOT``, ``kafkasim
chaos run --backend local-root``): everything ``cluster.chaos.LOCAL`` injects, and

* ``disk_full``: each broker's log dir is a tmpfs of its own (``cluster.tmpfs``, 64 MiB),
  mounted before the brokers start. The fault writes a ballast file into the target's tmpfs
  until it answers ENOSPC; the broker's next append that needs a new page fails with it, the
  produce is answered KAFKA_STORAGE_ERROR, the log dir goes offline and the broker halts (exit
  status 1), as Kafka's does when its log dirs have failed and as the simulation's does. Healing
  removes the ballast, and the runner starts the broker again: it recovers its log (an append
  cut short by the full disk is truncated, its CRC no longer checks) and rejoins the ISR.

* ``isolate``, ``split``, ``isolate_zk`` (and ``slow_network`` where the kernel has tc netem):
  each broker runs in a network namespace of its own behind a bridge (``cluster.netns``),
  ZooKeeper and the run's clients on the host reach every broker through it, and a fault is
  iptables DROP rules inside the namespaces (a netem qdisc for ``slow_network``). The runner
  undoes each fault; the namespaces and the host's link are removed when the cluster closes.

When the cluster stops, the brokers' files are copied from each tmpfs back onto the log dir
under it and every tmpfs is unmounted (on failure paths too): the run's directory then holds
what a run on plain directories holds. Without root (or without CAP_SYS_ADMIN), the backend
refuses ``disk_full`` and the network faults before anything starts, in one line saying why
(``slow_network`` also where a probe finds no netem in the kernel); what ``LOCAL`` injects it
injects the same way.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Final

from kafkasim.cluster.chaos import (
    INJECTABLE,
    LOSE_UNFLUSHED_REASON,
    NOT_INJECTABLE,
    ChaosError,
    LocalBackend,
    process_backend,
)
from kafkasim.cluster.local import BrokerProcess, LocalCluster
from kafkasim.cluster.netns import BrokerNetwork, NetnsError, netem_refusal, netns_refusal
from kafkasim.cluster.tmpfs import TmpfsError, TmpfsLogDirs, mount_refusal
from kafkasim.faults.backend import BackendSpec, broker_props
from kafkasim.faults.scenario import Scenario

__all__ = [
    "NETWORK_ACTIONS",
    "ROOT_RUNTIME",
    "NetnsCluster",
    "RootLocalBackend",
    "local_root",
    "local_root_spec",
]

logger = logging.getLogger(__name__)

ROOT_RUNTIME: Final = "local processes as root"
_MIB: Final = 1024 * 1024
NETWORK_ACTIONS: Final = frozenset({"isolate", "split", "isolate_zk"})
"""What the brokers' network namespaces inject (``slow_network`` too where netem is)."""


class NetnsCluster(LocalCluster):
    """``LocalCluster`` whose brokers run in ``network``'s namespaces (when it is set)."""

    network: BrokerNetwork | None = None

    def broker_argv(self, broker: BrokerProcess) -> list[str]:
        argv = super().broker_argv(broker)
        if self.network is None:
            return argv
        return [*self.network.exec_argv(broker.broker_id), *argv]


class RootLocalBackend(LocalBackend):
    """``LocalBackend`` with each broker's log dir on a tmpfs of its own and, where network
    faults are injectable, each broker in a network namespace of its own (see the module
    doc)."""

    def __init__(self, scenario: Scenario | None, root: Path) -> None:
        super().__init__(scenario, root)
        self._tmpfs = TmpfsLogDirs()
        self._network: BrokerNetwork | None = None

    @property
    def spec(self) -> BackendSpec:
        return local_root()

    @property
    def cluster(self) -> LocalCluster:
        if self._cluster is None:
            assert self.scenario is not None, "the root backend always has its scenario"
            self._cluster = NetnsCluster(
                self.root,
                brokers=self.scenario.cluster.brokers,
                broker_props=broker_props(self.scenario),
            )
        return self._cluster

    @property
    def mounts(self) -> tuple[Path, ...]:
        """The tmpfs mounts in place now."""
        return self._tmpfs.mounts

    @property
    def network(self) -> BrokerNetwork | None:
        """The brokers' namespaces, while they exist."""
        return self._network

    def start(self) -> None:
        try:
            for broker_id in self.broker_ids:
                self._tmpfs.mount(self.log_dir(broker_id))
            if self.spec.injectable & NETWORK_ACTIONS:
                self._create_network()
        except (TmpfsError, NetnsError) as e:
            self._remove_network(quietly=True)
            self._unmount(quietly=True)
            raise ChaosError(str(e)) from e
        super().start()

    def _create_network(self) -> None:
        cluster = self.cluster
        assert isinstance(cluster, NetnsCluster)
        network = BrokerNetwork(self.broker_ids)
        self._network = network
        network.create()
        cluster.network = network
        cluster.zookeeper.host = network.host_address
        for broker_id, broker in cluster.brokers.items():
            broker.host = network.address(broker_id)

    def describe(self) -> str:
        size_mib = self._tmpfs.size_bytes // _MIB
        where = f"{super().describe()}; log dirs on {size_mib} MiB tmpfs mounts"
        if self._network is not None:
            where += f"; each broker in a network namespace ({self._network.prefix}-b<N>)"
        return where

    def close(self) -> None:
        try:
            super().close()
        finally:
            try:
                self._remove_network(quietly=False)
            finally:
                self._unmount(quietly=False)

    def _remove_network(self, *, quietly: bool) -> None:
        if self._network is None:
            return
        try:
            self._network.remove()
        except NetnsError as e:
            if not quietly:
                raise ChaosError(str(e)) from e
        else:
            self._network = None

    def _network_of(self, action: str) -> BrokerNetwork:
        if self._network is None:
            why = self.spec.not_injectable.get(action, "the brokers' namespaces are not set up")
            raise ChaosError(f"{ROOT_RUNTIME} cannot inject {action}: {why}")
        return self._network

    def isolate(self, broker_id: int) -> None:
        self._network_of("isolate").isolate(broker_id)

    def reconnect(self, broker_id: int) -> None:
        self._network_of("isolate").reconnect(broker_id)

    def isolate_zk(self, broker_id: int) -> None:
        self._network_of("isolate_zk").isolate_zk(broker_id, self.cluster.zookeeper.port)

    def reconnect_zk(self, broker_id: int) -> None:
        self._network_of("isolate_zk").reconnect_zk(broker_id)

    def split(self, groups: list[list[int]]) -> None:
        self._network_of("split").split(groups)

    def heal_split(self) -> None:
        self._network_of("split").heal_split()

    def slow_network(self, broker_ids: list[int], latency_ms: float, jitter_ms: float) -> None:
        self._network_of("slow_network").slow(broker_ids or self.broker_ids, latency_ms, jitter_ms)

    def normal_network(self) -> None:
        self._network_of("slow_network").normal()

    def _unmount(self, *, quietly: bool) -> None:
        try:
            self._tmpfs.unmount_all()
        except (TmpfsError, OSError) as e:
            if not quietly:
                raise ChaosError(str(e)) from e

    def fill_disk(self, broker_id: int) -> None:
        try:
            ballast = self._tmpfs.fill(self.log_dir(broker_id))
        except (TmpfsError, OSError) as e:
            raise ChaosError(f"cannot fill broker {broker_id}'s disk: {e}") from e
        logger.info(
            "broker %d: its log dir's tmpfs is full (%d bytes of ballast)", broker_id, ballast
        )

    def free_disk(self, broker_id: int) -> None:
        try:
            self._tmpfs.free(self.log_dir(broker_id))
        except (TmpfsError, OSError) as e:
            raise ChaosError(f"cannot free broker {broker_id}'s disk: {e}") from e


def local_root_spec(
    mount: str | None, network: str | None = None, netem: str | None = None
) -> BackendSpec:
    """The root backend's spec: ``disk_full`` injectable when ``mount`` is None (this process
    may mount), the network faults when ``network`` is None (it may create namespaces), and
    ``slow_network`` when ``netem`` is None too; each refused otherwise, saying why."""
    refused: dict[str, str] = {}
    if mount is not None:
        refused["disk_full"] = f"a full disk needs a tmpfs mounted under each log dir: {mount}"
    if network is not None:
        why = f"cutting links needs each broker in a network namespace: {network}"
        refused.update(dict.fromkeys(NETWORK_ACTIONS, why))
    if network is not None or netem is not None:
        refused["slow_network"] = f"delaying links needs tc netem: {network or netem}"
    root_actions = (NETWORK_ACTIONS | {"disk_full", "slow_network"}) - set(refused)
    not_injectable: Mapping[str, str] = MappingProxyType(
        {a: why for a, why in NOT_INJECTABLE.items() if a not in root_actions} | refused
    )
    return BackendSpec(
        name="local-root",
        runtime=ROOT_RUNTIME,
        injectable=INJECTABLE | root_actions,
        not_injectable=not_injectable,
        lose_unflushed=LOSE_UNFLUSHED_REASON,
        create=process_backend(RootLocalBackend),
    )


@functools.cache
def local_root() -> BackendSpec:
    """Local processes with root's faults (``RootLocalBackend``), as far as this process may;
    built on first use (whether netem is there is probed once, in a scratch namespace)."""
    network = netns_refusal()
    return local_root_spec(mount_refusal(), network, None if network else netem_refusal())


def __getattr__(name: str) -> BackendSpec:
    """``LOCAL_ROOT``: ``local_root()``, built when first asked for (not at import: every
    ``kafkasim`` process imports this module, a broker too)."""
    if name == "LOCAL_ROOT":
        return local_root()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
