"""The layering rules of ARCHITECTURE.md, enforced by scanning imports.

* only the adapters import a transport or ZooKeeper client: grpc in ``node/rpc_grpc.py`` (the
  server side) and ``common/rpc_grpc_client.py`` (the client side), kazoo in
  ``controller/zk_kazoo.py``;
* only the clock adapter and the process managers read the wall clock or open sockets;
* ``storage/`` imports nothing of the project but ``common/``: it knows nothing of brokers,
  controllers, clients, the wire contract or networks;
* ``node/`` (the broker) imports nothing of what sits above it: clients, the simulation, the
  command line, the cluster backends, Spark;
* no two modules import each other (not even for type checking only);
* everything is imported through the one import name ``kafkasim`` (``kafkasim.storage.log``),
  never through a bare top-level folder name (``storage.log``), which an installed kafkasim
  does not provide.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = [
    "common",
    "storage",
    "node",
    "controller",
    "client",
    "sim",
    "faults",
    "cluster",
    "cli",
    "proto",
    "spark",
    "console",
]

ALLOWED = {
    "grpc": {"node/rpc_grpc.py", "common/rpc_grpc_client.py"},
    "kazoo": {"controller/zk_kazoo.py"},
    # Real processes and sockets: the ZooKeeper process manager probes its port; the gRPC
    # adapter probes an address it could not bind, for the OS's reason (gRPC gives none).
    "socket": {"controller/zk_process.py", "node/rpc_grpc.py"},
    # The wall clock: the Clock adapter, and the managers of real processes (timeouts), among
    # them the command-line verbs that start, watch and stop real clusters.
    "time": {
        "common/clock.py",
        "controller/zk_process.py",
        "cluster/local.py",
        "cli/cluster.py",
        "cli/demo_cluster.py",
    },
}
# What a package may not import: for storage, every project package but common (and itself),
# and the network and ZooKeeper libraries; for node, the packages above the broker.
FORBIDDEN = {
    "storage/": {*PACKAGES, "faults", "console", "bench", "grpc", "kazoo"} - {"common", "storage"},
    "node/": {"client", "sim", "cli", "cluster", "spark", "faults", "console", "bench"},
}


def _sources() -> list[Path]:
    files: list[Path] = []
    for package in PACKAGES:
        files.extend(p for p in (ROOT / package).rglob("*.py") if "_pb2" not in p.name)
    return sorted(files)


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def _violations(rel: str, modules: set[str]) -> list[str]:
    """What is wrong with module ``rel`` (a path under the root) importing ``modules``."""
    problems: list[str] = []
    for root_module, allowed in ALLOWED.items():
        used = sorted(m for m in modules if m == root_module or m.startswith(root_module + "."))
        if used and rel not in allowed:
            problems.append(f"{rel} imports {used}; only {sorted(allowed)} may")
    for prefix, forbidden in FORBIDDEN.items():
        if rel.startswith(prefix):
            bad = sorted(m for m in modules if _layer(m) in forbidden)
            if bad:
                problems.append(f"{prefix} module {rel} imports {bad}")
    return problems


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_respects_the_layering(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    problems = _violations(rel, _imported_modules(path))
    assert not problems, "; ".join(problems)


@pytest.mark.parametrize(
    ("rel", "module"),
    [
        ("storage/log.py", "kafkasim.node.broker"),
        ("storage/log.py", "kafkasim.client.simple"),
        ("storage/segment.py", "kafkasim.proto"),
        ("storage/segment.py", "grpc"),
        ("node/broker.py", "kafkasim.client.network"),
        ("node/fetcher.py", "kafkasim.sim.loop"),
        ("node/broker.py", "kafkasim.cli.main"),
        ("node/replica_manager.py", "kafkasim.cluster.local"),
        ("node/apis.py", "kafkasim.spark.source"),
        ("client/network.py", "grpc"),
        ("spark/cluster_io.py", "grpc.aio"),
    ],
)
def test_the_rules_refuse_a_forbidden_import(rel: str, module: str) -> None:
    assert _violations(rel, {module})


@pytest.mark.parametrize(
    ("rel", "module"),
    [
        ("storage/log.py", "kafkasim.common.errors"),
        ("storage/log.py", "kafkasim.storage.segment"),
        ("node/broker.py", "kafkasim.controller.controller"),
        ("node/fetcher.py", "kafkasim.common.rpc_grpc_client"),
        ("common/rpc_grpc_client.py", "grpc"),
        ("node/rpc_grpc.py", "grpc"),
        ("client/network.py", "kafkasim.common.rpc"),
    ],
)
def test_the_rules_allow_what_the_layering_allows(rel: str, module: str) -> None:
    assert not _violations(rel, {module})


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(("kafkasim", *parts[: -1 if parts[-1] == "__init__" else None]))


def _import_targets(path: Path) -> set[str]:
    """Every project module ``path`` imports, ``from a import b`` counting as ``a`` and ``a.b``
    (``b`` may be a submodule), imports under ``if TYPE_CHECKING:`` included."""
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets.add(node.module)
            targets.update(f"{node.module}.{alias.name}" for alias in node.names)
    return targets


def _mutual_imports(imports: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted(
        (a, b)
        for a, targets in imports.items()
        for b in targets
        if a < b and a in imports.get(b, ())
    )


def test_no_two_modules_import_each_other() -> None:
    """A pair of modules that import each other is one concept split in two, or a missing
    seam (the broker and its metrics were one: the metrics now read a protocol)."""
    imports = {_module_name(path): _import_targets(path) for path in _sources()}
    assert _mutual_imports(imports) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    imports = {"kafkasim.a": {"kafkasim.b"}, "kafkasim.b": {"kafkasim.a"}, "kafkasim.c": set()}
    assert _mutual_imports(imports) == [("kafkasim.a", "kafkasim.b")]


def _layer(module: str) -> str:
    """The project package (or the third-party root) a dotted import name belongs to."""
    parts = module.split(".")
    return parts[1] if parts[0] == "kafkasim" and len(parts) > 1 else parts[0]


@pytest.mark.parametrize(
    "path",
    sorted([*_sources(), *(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_imports_go_through_the_one_import_name(path: Path) -> None:
    bare = sorted(m for m in _imported_modules(path) if m.split(".")[0] in PACKAGES)
    assert not bare, f"{path.relative_to(ROOT)} imports {bare}: write kafkasim.{bare[0]}"


def test_the_scan_sees_the_adapters() -> None:
    """Guard against a scan that silently finds nothing."""
    assert "grpc" in _imported_modules(ROOT / "node/rpc_grpc.py")
    assert "grpc" in _imported_modules(ROOT / "common/rpc_grpc_client.py")
    assert "kazoo" in {m.split(".")[0] for m in _imported_modules(ROOT / "controller/zk_kazoo.py")}
