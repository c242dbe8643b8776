"""The built wheel installs one import name, ``kafkasim``, and nothing else.

A wheel that put ``proto``, ``common``, ``client``… into site-packages would clash with other
distributions (proto-plus, which every Google Cloud library installs, is imported as ``proto``).
The wheel is built from a copy of the sources (the repository keeps its top-level folders and
``kafkasim/`` links to them), and imported from where it was unpacked beside a stand-in
``proto`` package of another distribution.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _source_entries() -> list[Path]:
    """What the wheel is built from: the project file, the README and the package tree."""
    linked = [p.resolve() for p in (ROOT / "kafkasim").iterdir() if p.is_symlink()]
    return [ROOT / "pyproject.toml", ROOT / "README.md", ROOT / "kafkasim", *linked]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src"
    src.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for entry in _source_entries():
        if entry.is_dir():
            shutil.copytree(entry, src / entry.name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(entry, src / entry.name)
    out = work / "out"
    subprocess.run(
        [
            sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
            "--no-build-isolation", "--wheel-dir", str(out), str(src),
        ],
        check=True,
        capture_output=True,
        text=True,
    )  # fmt: skip
    (built,) = out.glob("kafkasim-*.whl")
    return built


def test_the_wheel_holds_only_the_kafkasim_import_name(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    assert tops == {"kafkasim", next(t for t in tops if t.endswith(".dist-info"))}, tops
    # Every package of the repository is inside, with its data files.
    for package in ("common", "storage", "node", "controller", "client", "cli", "proto"):
        assert f"kafkasim/{package}/__init__.py" in names, package
    assert "kafkasim/proto/kafkasim_pb2.py" in names
    assert any(
        n.startswith("kafkasim/") and "/catalog/" in n and n.endswith(".toml") for n in names
    )
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "kafkasim = kafkasim.cli.entry:main" in text


def test_the_unpacked_wheel_imports_beside_another_proto_package(
    wheel: Path, tmp_path: Path
) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    # A stand-in for proto-plus, whose import name is ``proto``.
    (site / "proto").mkdir()
    (site / "proto" / "__init__.py").write_text('OWNER = "proto-plus"\n')
    code = (
        "import proto, kafkasim, kafkasim.proto\n"
        "from kafkasim.proto import kafkasim_pb2\n"
        "from kafkasim.cli.entry import main\n"
        "assert proto.OWNER == 'proto-plus', proto.__file__\n"
        "print(kafkasim.__file__)\n"
        "print(kafkasim_pb2.ProduceRequest.DESCRIPTOR.full_name)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        check=True,
        capture_output=True,
        text=True,
    )
    where, message = done.stdout.split()
    assert Path(where).is_relative_to(site)
    assert message == "kafkasim.ProduceRequest"
