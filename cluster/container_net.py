"""Link faults inside the compose brokers' containers: iptables DROP rules in each broker
container's own network namespace, added from the host (``ContainerNetwork``; the compose
backend's ``split``, ``isolate_zk`` and ``partition_one_way``).

A container's namespace is reachable from the host as ``/proc/<pid>/ns/net`` (``docker
inspect``'s ``State.Pid``), so ``nsenter --net=/proc/<pid>/ns/net iptables ...`` filters
that container's traffic without touching the host's firewall, the image or the container's
capabilities (the host's root does it). Rules are keyed by the peers' addresses on the
project's ``cluster`` network (where the brokers replicate and ZooKeeper is), so that clients
on the published ``host-access`` network still reach every broker, as the local-root backend's
namespaces keep them (``cluster.netns``: the same rule bookkeeping and builders):

* ``split``: in each broker's namespace, packets to and from the brokers of the other groups;
* ``isolate_zk``: packets to and from ZooKeeper's address and port;
* ``partition_one_way`` (``cut_one_way(src, dst)``): in ``src``'s namespace, what it sends to
  ``dst`` (``dst`` no longer hears ``src``; what ``dst`` sends still arrives). Cuts of the same
  pair are counted, as the simulation counts them: the last heal removes the rule.

Every rule added is recorded under its fault; healing deletes exactly those, and ``remove`` (the
backend's close) every one in force. A container started again (``docker start`` after a kill
or a stop) or connected again (after ``isolate``) has a new namespace, maybe a new address:
its old rules are gone with the old namespace, so ``refresh`` lays every fault in force again
where the containers are now (a partition outlives a restart, as on a real network). A broker
that is not running when a fault is laid gets its rules when it starts.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from kafkasim.cluster.chaos import ChaosError
from kafkasim.cluster.netns import (
    DropRule,
    DropRules,
    Runner,
    netem_refusal,
    netns_refusal,
    run_command,
    split_rules,
    zookeeper_rules,
)


class ComposeProject(Protocol):
    """What :func:`locate` reads of a ``cluster.compose.ComposeCluster`` (a protocol here:
    compose imports this module, and no two modules import each other)."""

    project: str
    ports: dict[int, int]

    @property
    def network(self) -> str: ...

    def docker(self, *args: str, timeout_s: float = ...) -> str: ...

    def container(self, broker_id: int) -> str: ...


__all__ = [
    "DELAYS",
    "LINK_FAULTS",
    "ZOOKEEPER_PORT",
    "ContainerLinkFaults",
    "ContainerNetwork",
    "Where",
    "delay_refusal",
    "filtering_refusal",
    "link_refusals",
    "locate",
    "nsenter",
]

ZOOKEEPER_PORT: Final = 2181  # zookeeper.connect=zookeeper:2181 in compose/docker-compose.yml
ZOOKEEPER_SERVICE: Final = "zookeeper"
LINK_FAULTS: Final = frozenset({"split", "isolate_zk", "partition_one_way"})
"""What the rules inject, where this process may filter inside the containers (root)."""
DELAYS: Final = ("slow_network", "slow_one_way")
"""What they do not: a delay needs a qdisc."""


def filtering_refusal(euid: int | None = None, cap_eff: int | None = None) -> str | None:
    """Why this process cannot filter packets inside the containers (one clause), None when it
    can: what namespaces need (root, CAP_NET_ADMIN and CAP_SYS_ADMIN, iptables), and nsenter."""
    refusal = netns_refusal(euid, cap_eff)
    if refusal is None and shutil.which("nsenter") is None:
        return "entering a container's namespace needs nsenter (util-linux), not installed here"
    return refusal


def delay_refusal() -> str:
    """Why containers are not slowed here (one clause): the kernel's netem, as probed."""
    netem = netem_refusal()
    if netem is not None:
        return f"delaying a container's traffic needs tc netem in the host's kernel: {netem}"
    return "delaying a container's traffic is not implemented (local-root's namespaces do it)"


def link_refusals(filtering: str | None, delay: str) -> dict[str, str]:
    """The link faults and delays refused, each with its reason: the delays for ``delay``, the
    link faults too when ``filtering`` (``filtering_refusal``) is not None."""
    refused = dict.fromkeys(DELAYS, delay)
    if filtering is not None:
        why = f"cutting links inside the containers needs nsenter and iptables: {filtering}"
        refused.update(dict.fromkeys(LINK_FAULTS, why))
    return refused


def nsenter(pid: int) -> tuple[str, ...]:
    """The prefix that runs a host command in the network namespace of process ``pid``."""
    return ("nsenter", f"--net=/proc/{pid}/ns/net")


@dataclass(frozen=True, slots=True)
class Where:
    """Where the project's containers are now: how to enter each running broker's namespace,
    each broker's address on the ``cluster`` network (one disconnected or stopped has none),
    and ZooKeeper's (None: it has none)."""

    enter: Mapping[int, tuple[str, ...]]
    address: Mapping[int, str]
    zookeeper: str | None


Rules = Callable[[Where], Iterable[DropRule]]
"""A fault's rules, given where the containers are."""


def _inspect_line(network: str) -> str:
    # ``index`` on a network the container is not on fails: range finds it or nothing.
    address = (
        "{{range $name, $net := .NetworkSettings.Networks}}"
        f'{{{{if eq $name "{network}"}}}}{{{{$net.IPAddress}}}}{{{{end}}}}'
        "{{end}}"
    )
    return "{{.Id}} {{.State.Pid}} " + address


def locate(cluster: ComposeProject) -> Where:
    """Where ``cluster``'s brokers and ZooKeeper are now (two docker calls)."""
    zookeeper = cluster.docker(
        "ps",
        "-a",
        "-q",
        "--no-trunc",
        "--filter",
        f"label=com.docker.compose.project={cluster.project}",
        "--filter",
        f"label=com.docker.compose.service={ZOOKEEPER_SERVICE}",
    ).split()
    brokers = {cluster.container(b): b for b in sorted(cluster.ports)}
    out = cluster.docker(
        "inspect", "--format", _inspect_line(cluster.network), *brokers, *zookeeper
    )
    enter: dict[int, tuple[str, ...]] = {}
    address: dict[int, str] = {}
    zookeeper_address: str | None = None
    for line in out.splitlines():
        container, pid, *ip = line.split()
        broker_id = brokers.get(container)
        if broker_id is None:
            zookeeper_address = ip[0] if ip else None
            continue
        if int(pid) > 0:
            enter[broker_id] = nsenter(int(pid))
        if ip:
            address[broker_id] = ip[0]
    return Where(enter, address, zookeeper_address)


class ContainerNetwork:
    """The DROP rules of one compose project's link faults (see the module doc). ``where``:
    where the containers are now (``locate``; tests give their own); ``run``: how commands
    run."""

    def __init__(self, where: Callable[[], Where], run: Runner = run_command) -> None:
        self._where = where
        self._rules = DropRules(run)
        self._in_force: dict[str, Rules] = {}  # by fault, in the order laid
        self._one_way: dict[tuple[int, int], int] = {}  # cuts of each pair in force

    @property
    def rules(self) -> dict[str, list[DropRule]]:
        """The rules in force, by fault."""
        return self._rules.by_fault

    @property
    def in_force(self) -> tuple[str, ...]:
        """The faults in force, in the order laid."""
        return tuple(self._in_force)

    def _now(self) -> Where:
        """Where the containers are, the rules of namespaces no longer there forgotten."""
        where = self._where()
        live = set(where.enter.values())
        self._rules.forget(lambda rule: rule.enter not in live)
        return where

    def _lay(self, fault: str, rules: Rules) -> None:
        where = self._now()
        self._rules.undrop(fault)  # one in force is replaced
        self._in_force[fault] = rules
        self._rules.drop(fault, rules(where))

    def _lift(self, fault: str) -> None:
        self._now()
        self._in_force.pop(fault, None)
        self._rules.undrop(fault)

    def split(self, groups: list[list[int]]) -> None:
        """No packet between brokers of different groups (a split in force is replaced)."""
        frozen = [list(group) for group in groups]
        self._lay("split", lambda w: split_rules(frozen, w.enter.get, w.address.get))

    def heal_split(self) -> None:
        self._lift("split")

    def isolate_zk(self, broker_id: int) -> None:
        def rules(where: Where) -> Iterable[DropRule]:
            enter = where.enter.get(broker_id)
            if enter is None or where.zookeeper is None:
                return ()
            return zookeeper_rules(enter, where.zookeeper, ZOOKEEPER_PORT)

        self._lay(f"isolate_zk:{broker_id}", rules)

    def reconnect_zk(self, broker_id: int) -> None:
        self._lift(f"isolate_zk:{broker_id}")

    def cut_one_way(self, src: int, dst: int) -> None:
        """What ``src`` sends ``dst`` is dropped; ``dst`` to ``src`` flows."""
        if src == dst:
            raise ValueError(f"a broker cannot be cut from itself: {src}")
        cuts = self._one_way.get((src, dst), 0)
        self._one_way[(src, dst)] = cuts + 1
        if cuts:
            return

        def rules(where: Where) -> Iterable[DropRule]:
            enter, peer = where.enter.get(src), where.address.get(dst)
            if enter is None or peer is None:
                return ()
            return (DropRule(enter, "OUTPUT", ("-d", peer)),)

        self._lay(f"one_way:{src}>{dst}", rules)

    def heal_one_way(self, src: int, dst: int) -> None:
        cuts = self._one_way.pop((src, dst), 0) - 1
        if cuts > 0:
            self._one_way[(src, dst)] = cuts
            return
        self._lift(f"one_way:{src}>{dst}")

    def refresh(self) -> None:
        """Lay every fault in force again where the containers are now (after a container
        started or connected again: a new namespace, maybe a new address)."""
        if not self._in_force:
            return
        where = self._now()
        for fault, rules in self._in_force.items():
            self._rules.undrop(fault)
            self._rules.drop(fault, rules(where))

    def remove(self) -> None:
        """Delete every rule in force (those in namespaces still there); nothing in force
        afterwards."""
        if self._rules.by_fault:
            self._now()
            for fault in list(self._rules.by_fault):
                self._rules.undrop(fault)
        self._in_force.clear()
        self._one_way.clear()


class ContainerLinkFaults:
    """The link faults of ``cluster.chaos.NetworkFaults`` (and the one-way cuts) of a backend
    with a ``ContainerNetwork``; the delays refused (``delay_refusal``)."""

    network: ContainerNetwork

    def split(self, groups: list[list[int]]) -> None:
        self.network.split(groups)

    def heal_split(self) -> None:
        self.network.heal_split()

    def isolate_zk(self, broker_id: int) -> None:
        self.network.isolate_zk(broker_id)

    def reconnect_zk(self, broker_id: int) -> None:
        self.network.reconnect_zk(broker_id)

    def cut_one_way(self, src: int, dst: int) -> None:
        self.network.cut_one_way(src, dst)

    def heal_one_way(self, src: int, dst: int) -> None:
        self.network.heal_one_way(src, dst)

    def slow_network(self, broker_ids: list[int], latency_ms: float, jitter_ms: float) -> None:
        del broker_ids, latency_ms, jitter_ms
        raise ChaosError(f"containers cannot be slowed: {delay_refusal()}")

    def normal_network(self) -> None:
        raise ChaosError(f"containers cannot be slowed: {delay_refusal()}")
