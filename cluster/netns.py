"""Each local broker in a Linux network namespace of its own, so that links can be cut.

The layout of one cluster (``BrokerNetwork``; every name starts with a per-run unique prefix
``ks<6 hex>``, so that nothing of another run, nor anything else on the host, is touched)::

    host (ZooKeeper, the run's clients)          <prefix>-h   10.231.X.1/24
        └─ veth ─ <prefix>-hub namespace: bridge br0, ports host, b1, b2, ...
                    └─ veth ─ <prefix>-b<N> namespace: eth0 10.231.X.(10+N)/24, lo

The bridge lives in a namespace of its own: the host's firewall (Docker's FORWARD policy DROP
with bridged traffic sent through iptables) never sees the brokers' traffic, and nothing on the
host's firewall is changed. ZooKeeper listens on the host's address; the brokers' listeners
bind and advertise their namespace's address; the run's clients reach them over the bridge.

Faults are iptables DROP rules inside the brokers' namespaces, so that a cut connection hangs
as on a real network (nothing answers, sessions time out):

* ``isolate``: every packet in or out of eth0 (peers, ZooKeeper and clients);
* ``split``: packets to and from the brokers of the other groups (ZooKeeper and clients
  still reach every side);
* ``isolate_zk``: packets to and from ZooKeeper's address and port;
* ``slow_network``: a netem qdisc on each broker's eth0, where the kernel has netem
  (``netem_refusal`` probes it once, in a scratch namespace).

What is created is recorded (namespaces, the host's link, rules, qdiscs) and exactly that is
removed by ``remove`` (the backend's close, on failure paths too) and at interpreter exit
should a run end without it. Needs root (``netns_refusal`` says in one clause why not).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import ipaddress
import logging
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kafkasim.cluster.host_tools import ToolError, run_tool
from kafkasim.cluster.tmpfs import CAP_SYS_ADMIN, effective_capabilities
from kafkasim.common.errors import KafkasimError

__all__ = [
    "BrokerNetwork",
    "DropRule",
    "DropRules",
    "NetnsError",
    "choose_subnet",
    "netem_refusal",
    "netns_enter",
    "netns_refusal",
    "split_rules",
    "zookeeper_rules",
]

logger = logging.getLogger(__name__)

CAP_NET_ADMIN: Final = 12  # linux/capability.h
SUBNET_PREFIX: Final = "10.231"
BROKER_HOST_BASE: Final = 10  # broker N is 10.231.X.(10 + N)
_BROKER_IF: Final = "eth0"
_COMMAND_TIMEOUT_S: Final = 30.0
_LOCK_FILE: Final = Path(tempfile.gettempdir()) / "kafkasim-netns.lock"
_TOOLS: Final = ("ip", "iptables")

Runner = Callable[[list[str]], str]
"""Runs one command and returns its output; raises ``NetnsError`` when it fails."""

# Every network of this process not yet removed (for the exit hook).
_live: set[BrokerNetwork] = set()


class NetnsError(KafkasimError):
    """A command that set up, changed or removed a network and failed (with its error)."""


def run_command(argv: list[str]) -> str:
    """Run ``argv``; its stdout, or ``NetnsError`` naming the command and its error."""
    try:
        return run_tool(argv, _COMMAND_TIMEOUT_S)
    except ToolError as e:
        raise NetnsError(str(e)) from e


def netns_refusal(euid: int | None = None, cap_eff: int | None = None) -> str | None:
    """Why this process cannot put brokers in network namespaces (one clause), None when it
    can: root with CAP_NET_ADMIN and CAP_SYS_ADMIN, ``ip`` and ``iptables`` installed."""
    euid = os.geteuid() if euid is None else euid
    if euid != 0:
        return f"network namespaces need root, and this process runs as uid {euid}"
    caps = effective_capabilities() if cap_eff is None else cap_eff
    lacking = [
        name
        for name, bit in (("CAP_NET_ADMIN", CAP_NET_ADMIN), ("CAP_SYS_ADMIN", CAP_SYS_ADMIN))
        if not caps >> bit & 1
    ]
    if lacking:
        return f"network namespaces need {' and '.join(lacking)}, which this root process lacks"
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        return f"network namespaces need {' and '.join(missing)}, not installed here"
    return None


@functools.cache
def netem_refusal() -> str | None:
    """Why ``slow_network`` cannot be injected here (one clause), None when it can: probed
    once per process by adding a netem qdisc to the loopback of a scratch namespace."""
    refusal = netns_refusal()
    if refusal is not None:
        return refusal
    if shutil.which("tc") is None:
        return "delaying packets needs tc (iproute2) with netem, and tc is not installed here"
    probe = f"{_new_prefix()}-probe"
    run_command(["ip", "netns", "add", probe])
    try:
        run_command(["ip", "netns", "exec", probe, *netem_argv("lo", 1.0, 0.0)])
    except NetnsError as e:
        answer = e.__cause__.error if isinstance(e.__cause__, ToolError) else str(e)
        return f"tc netem is missing from this kernel (tc: {answer})"
    finally:
        run_command(["ip", "netns", "del", probe])
    return None


def netem_argv(device: str, latency_ms: float, jitter_ms: float) -> list[str]:
    """The tc command that delays what leaves ``device`` by ``latency_ms`` ± ``jitter_ms``."""
    delay = ["delay", f"{latency_ms:g}ms"]
    if jitter_ms > 0:
        delay.append(f"{jitter_ms:g}ms")
    return ["tc", "qdisc", "add", "dev", device, "root", "netem", *delay]


def choose_subnet(addresses: str, start: int) -> int:
    """The first X from ``start`` (wrapping, 1..254) with no address or route in 10.231.X.0/24
    in ``addresses`` (the text of ``ip -4 -o addr`` and ``ip -4 route``)."""
    used = {int(x) for x in re.findall(rf"\b{re.escape(SUBNET_PREFIX)}\.(\d+)\.", addresses)}
    for step in range(254):
        candidate = (start - 1 + step) % 254 + 1
        if candidate not in used:
            return candidate
    raise NetnsError(f"no free {SUBNET_PREFIX}.X.0/24 subnet on this host")


def _new_prefix() -> str:
    return f"ks{secrets.token_hex(3)}"


def netns_enter(namespace: str) -> tuple[str, ...]:
    """The prefix that runs a command in the named namespace (``ip netns exec`` execs it: the
    command keeps the pid it was started with)."""
    return ("ip", "netns", "exec", namespace)


@dataclass(frozen=True, slots=True)
class DropRule:
    """One iptables DROP rule in a namespace's filter table; ``enter``: the command prefix that
    runs a command in that namespace (``netns_enter``, or ``nsenter --net=...`` for a
    container's: ``cluster.container_net``)."""

    enter: tuple[str, ...]
    chain: str  # INPUT or OUTPUT
    match: tuple[str, ...]

    def argv(self, op: str) -> list[str]:
        """The command that appends (``-A``) or deletes (``-D``) this rule."""
        return [*self.enter, "iptables", "-w", op, self.chain, *self.match, "-j", "DROP"]


class DropRules:
    """The DROP rules added, by fault, each recorded once added (so that ``undrop`` deletes
    exactly those); ``run``: how commands run."""

    def __init__(self, run: Runner) -> None:
        self._run = run
        self.by_fault: dict[str, list[DropRule]] = {}

    def drop(self, fault: str, rules: Iterable[DropRule]) -> None:
        """Add ``rules`` under ``fault`` (recorded one by one)."""
        added = self.by_fault.setdefault(fault, [])
        for rule in rules:
            self._run(rule.argv("-A"))
            added.append(rule)

    def undrop(self, fault: str) -> None:
        """Delete the rules added under ``fault``, newest first (none: nothing)."""
        added = self.by_fault.get(fault, [])
        while added:
            self._run(added[-1].argv("-D"))
            added.pop()
        self.by_fault.pop(fault, None)

    def forget(self, gone: Callable[[DropRule], bool]) -> None:
        """Unrecord, running nothing, the rules that ``gone`` says went with their namespace."""
        for added in self.by_fault.values():
            added[:] = [rule for rule in added if not gone(rule)]

    def clear(self) -> None:
        self.by_fault.clear()


def zookeeper_rules(enter: tuple[str, ...], zookeeper: str, port: int) -> tuple[DropRule, ...]:
    """What cuts one namespace off ZooKeeper at ``zookeeper``:``port``, both directions."""
    return (
        DropRule(enter, "OUTPUT", ("-d", zookeeper, "-p", "tcp", "--dport", str(port))),
        DropRule(enter, "INPUT", ("-s", zookeeper, "-p", "tcp", "--sport", str(port))),
    )


def split_rules(
    groups: list[list[int]],
    enter: Callable[[int], tuple[str, ...] | None],
    address: Callable[[int], str | None],
) -> Iterator[DropRule]:
    """What keeps brokers of different groups apart: in each broker's namespace (``enter``),
    packets to and from every broker of the other groups (by ``address``). A broker with no
    namespace or no address now (None: a stopped container) is left out."""
    for group in groups:
        for broker_id in group:
            where = enter(broker_id)
            if where is None:
                continue
            for other in groups:
                if other is group:
                    continue
                for peer in other:
                    peer_address = address(peer)
                    if peer_address is not None:
                        yield DropRule(where, "OUTPUT", ("-d", peer_address))
                        yield DropRule(where, "INPUT", ("-s", peer_address))


class BrokerNetwork:
    """The namespaces, bridge and links of one cluster's brokers (see the module doc).
    ``subnet``: X of 10.231.X.0/24 (None: the first free one, chosen at ``create``);
    ``run``: how commands run (tests record them)."""

    def __init__(
        self,
        broker_ids: Iterable[int],
        *,
        prefix: str | None = None,
        subnet: int | None = None,
        run: Runner = run_command,
    ) -> None:
        self.broker_ids = tuple(sorted(broker_ids))
        if subnet is not None and not 1 <= subnet <= 254:
            raise ValueError(f"subnet must be 1..254 (10.231.X.0/24), got {subnet}")
        if any(not 1 <= b <= 254 - BROKER_HOST_BASE for b in self.broker_ids):
            raise ValueError(f"broker ids must be 1..{254 - BROKER_HOST_BASE} in a namespace")
        self.prefix = prefix or _new_prefix()
        self.subnet = subnet
        self._run = run
        self.namespaces: list[str] = []  # created, in order
        self.host_links: list[str] = []  # created on the host, in order
        self._rules = DropRules(run)
        self.delayed: list[str] = []  # namespaces with a netem qdisc on eth0

    @property
    def hub(self) -> str:
        return f"{self.prefix}-hub"

    @property
    def host_link(self) -> str:
        return f"{self.prefix}-h"

    def namespace(self, broker_id: int) -> str:
        return f"{self.prefix}-b{broker_id}"

    @property
    def host_address(self) -> str:
        """The host's address on the bridge (ZooKeeper listens there)."""
        return self._address(1)

    def address(self, broker_id: int) -> str:
        return self._address(BROKER_HOST_BASE + broker_id)

    def _address(self, host: int) -> str:
        if self.subnet is None:
            raise NetnsError("the brokers' network is not created yet")
        return str(ipaddress.IPv4Address(f"{SUBNET_PREFIX}.{self.subnet}.{host}"))

    @property
    def rules(self) -> dict[str, list[DropRule]]:
        """The DROP rules in force, by fault."""
        return self._rules.by_fault

    def exec_argv(self, broker_id: int) -> list[str]:
        """The prefix that runs a command in the broker's namespace (``netns_enter``)."""
        return list(netns_enter(self.namespace(broker_id)))

    def create(self) -> None:
        """Create the namespaces, the bridge and the links; on a failure, remove what was
        created and raise ``NetnsError``."""
        _live.add(self)
        try:
            with _subnet_lock():
                if self.subnet is None:
                    self.subnet = choose_subnet(_host_addresses(), secrets.randbelow(254) + 1)
                self._create_hub()
            for broker_id in self.broker_ids:
                self._create_broker(broker_id)
        except BaseException:
            with contextlib.suppress(NetnsError):
                self.remove()
            raise

    def _create_hub(self) -> None:
        hub = self.hub
        self._add_namespace(hub)
        self._run(["ip", "-n", hub, "link", "add", "br0", "type", "bridge"])
        self._run(["ip", "-n", hub, "link", "set", "br0", "up"])
        self._run(
            ["ip", "link", "add", self.host_link, "type", "veth", "peer", "name", "host",
             "netns", hub]
        )  # fmt: skip
        self.host_links.append(self.host_link)
        self._run(["ip", "-n", hub, "link", "set", "host", "master", "br0", "up"])
        self._run(["ip", "addr", "add", f"{self.host_address}/24", "dev", self.host_link])
        self._run(["ip", "link", "set", self.host_link, "up"])

    def _create_broker(self, broker_id: int) -> None:
        hub, namespace, port = self.hub, self.namespace(broker_id), f"b{broker_id}"
        self._add_namespace(namespace)
        self._run(
            ["ip", "-n", hub, "link", "add", port, "type", "veth", "peer", "name", _BROKER_IF,
             "netns", namespace]
        )  # fmt: skip
        self._run(["ip", "-n", hub, "link", "set", port, "master", "br0", "up"])
        address = f"{self.address(broker_id)}/24"
        self._run(["ip", "-n", namespace, "addr", "add", address, "dev", _BROKER_IF])
        self._run(["ip", "-n", namespace, "link", "set", _BROKER_IF, "up"])
        self._run(["ip", "-n", namespace, "link", "set", "lo", "up"])

    def _add_namespace(self, name: str) -> None:
        self._run(["ip", "netns", "add", name])
        self.namespaces.append(name)

    def remove(self) -> None:
        """Remove everything ``create`` made (its rules and qdiscs go with the namespaces):
        each one tried, the first error raised after the rest. Idempotent."""
        errors: list[NetnsError] = []
        for link in reversed(self.host_links):
            try:
                self._run(["ip", "link", "del", link])
            except NetnsError as e:
                errors.append(e)
            else:
                self.host_links.remove(link)
        for namespace in reversed(self.namespaces):
            try:
                self._run(["ip", "netns", "del", namespace])
            except NetnsError as e:
                errors.append(e)
            else:
                self.namespaces.remove(namespace)
        self._rules.clear()
        self.delayed.clear()
        if not (self.namespaces or self.host_links):
            _live.discard(self)
        if errors:
            raise errors[0]

    # -- faults -------------------------------------------------------------------------------

    def drop(self, fault: str, rules: Iterable[DropRule]) -> None:
        """Add ``rules`` under ``fault`` (``undrop`` removes exactly those added)."""
        self._rules.drop(fault, rules)

    def undrop(self, fault: str) -> None:
        """Delete the rules added under ``fault`` (none: nothing)."""
        self._rules.undrop(fault)

    def isolate(self, broker_id: int) -> None:
        enter = netns_enter(self.namespace(broker_id))
        self.drop(
            f"isolate:{broker_id}",
            (
                DropRule(enter, "INPUT", ("-i", _BROKER_IF)),
                DropRule(enter, "OUTPUT", ("-o", _BROKER_IF)),
            ),
        )

    def reconnect(self, broker_id: int) -> None:
        self.undrop(f"isolate:{broker_id}")

    def isolate_zk(self, broker_id: int, zk_port: int) -> None:
        enter = netns_enter(self.namespace(broker_id))
        self.drop(f"isolate_zk:{broker_id}", zookeeper_rules(enter, self.host_address, zk_port))

    def reconnect_zk(self, broker_id: int) -> None:
        self.undrop(f"isolate_zk:{broker_id}")

    def split(self, groups: list[list[int]]) -> None:
        """No packet between brokers of different groups (a split in force is replaced)."""
        self.undrop("split")
        self.drop(
            "split",
            split_rules(groups, lambda b: netns_enter(self.namespace(b)), self.address),
        )

    def heal_split(self) -> None:
        self.undrop("split")

    def slow(self, broker_ids: Iterable[int], latency_ms: float, jitter_ms: float) -> None:
        """Delay what each broker sends (a netem qdisc on its eth0; one in force is replaced)."""
        self.normal()
        for broker_id in broker_ids:
            ns = self.namespace(broker_id)
            self._run(["ip", "netns", "exec", ns, *netem_argv(_BROKER_IF, latency_ms, jitter_ms)])
            self.delayed.append(ns)

    def normal(self) -> None:
        while self.delayed:
            ns = self.delayed[-1]
            self._run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", _BROKER_IF, "root"])
            self.delayed.pop()


@contextlib.contextmanager
def _subnet_lock() -> Iterator[None]:
    """Held while a subnet is chosen and taken, so that two runs never pick the same one."""
    with open(_LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _host_addresses() -> str:
    return run_command(["ip", "-4", "-o", "addr"]) + run_command(["ip", "-4", "route"])


@atexit.register
def _remove_leftovers() -> None:
    """A run that ended without its backend's close leaves no namespace or link behind."""
    for network in list(_live):
        try:
            network.remove()
        except NetnsError as e:
            logger.error("%s", e)
