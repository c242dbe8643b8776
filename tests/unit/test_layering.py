"""The layering rules of ARCHITECTURE.md, enforced by scanning imports.

* only the adapters import a transport or ZooKeeper client: grpc in ``node/rpc_grpc.py``,
  kazoo in ``controller/zk_kazoo.py``;
* only the clock adapter and the process managers read the wall clock or open sockets;
* ``storage/`` knows nothing of brokers, controllers, clients, the wire contract or networks;
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
]

ALLOWED = {
    "grpc": {"node/rpc_grpc.py"},
    "kazoo": {"controller/zk_kazoo.py"},
    # Real processes and sockets: the ZooKeeper process manager probes its port.
    "socket": {"controller/zk_process.py"},
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
STORAGE_FORBIDDEN = ("node", "controller", "client", "proto", "sim", "cluster", "grpc", "kazoo")


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


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_respects_the_layering(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    modules = _imported_modules(path)
    for root_module, allowed in ALLOWED.items():
        used = sorted(m for m in modules if m == root_module or m.startswith(root_module + "."))
        assert not used or rel in allowed, f"{rel} imports {used}; only {sorted(allowed)} may"
    if rel.startswith("storage/"):
        bad = sorted(m for m in modules if _layer(m) in STORAGE_FORBIDDEN)
        assert not bad, f"storage module {rel} imports {bad}"


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
    assert "kazoo" in {m.split(".")[0] for m in _imported_modules(ROOT / "controller/zk_kazoo.py")}
