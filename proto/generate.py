"""Regenerate the message code from ``proto/kafkasim.proto``.

Run from anywhere: ``.venv/bin/python -m kafkasim.proto.generate``.
It writes ``proto/kafkasim_pb2.py`` (protoc's Python messages) and ``proto/kafkasim_pb2.pyi``
(mypy-protobuf's typed stub). Only message classes are generated: no ``_grpc`` stubs, because
``node/rpc_grpc.py`` serves and calls through generic handlers built from the method table in
``proto/__init__.py``.

Both files are committed; ``tests/unit/proto/test_generated.py`` regenerates them into a
temporary directory and fails if the committed copies differ, so they cannot drift from the
.proto or from the pinned grpcio-tools / mypy-protobuf versions.

The repository root is the include path and the .proto is named through the ``kafkasim/``
links, so it is registered as ``kafkasim/proto/kafkasim.proto`` and protoc names the module
``kafkasim.proto.kafkasim_pb2``: any import it generates between our own .proto files is
already ``from kafkasim.proto import ..._pb2`` — no rewriting of ``import x_pb2`` lines is
needed (``_check_imports`` makes sure it stays that way).
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from grpc_tools import protoc  # type: ignore[import-untyped]  # no stubs; only used here

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_FILE = Path("kafkasim") / "proto" / "kafkasim.proto"
GENERATED_FILES = (
    Path("kafkasim") / "proto" / "kafkasim_pb2.py",
    Path("kafkasim") / "proto" / "kafkasim_pb2.pyi",
)

# A bare `import foo_pb2` would only work with proto/ itself on sys.path.
_BARE_PB2_IMPORT = re.compile(r"^import \w+_pb2\b", re.MULTILINE)


def _mypy_plugin() -> Path:
    """``protoc-gen-mypy`` from the same environment as this interpreter."""
    found = shutil.which("protoc-gen-mypy", path=str(Path(sys.executable).parent))
    if found is None:
        raise FileNotFoundError(
            "protoc-gen-mypy not found beside the interpreter; install the dev extras "
            "(pip install -e '.[dev]')"
        )
    return Path(found)


def _check_imports(path: Path) -> None:
    match = _BARE_PB2_IMPORT.search(path.read_text(encoding="utf-8"))
    if match is not None:
        raise RuntimeError(f"{path}: generated a bare import {match.group(0)!r}")


def generate(out_dir: Path) -> list[Path]:
    """Run protoc into ``out_dir`` (the tree mirrors the repo: ``out_dir/proto/...``).

    Returns the generated files. Raises ``RuntimeError`` if protoc fails.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"--proto_path={REPO_ROOT}",
        f"--plugin=protoc-gen-mypy={_mypy_plugin()}",
        f"--python_out={out_dir}",
        f"--mypy_out={out_dir}",
        str(REPO_ROOT / PROTO_FILE),
    ]
    status = protoc.main(args)
    if status != 0:
        raise RuntimeError(f"protoc failed with status {status}: {' '.join(args)}")
    produced = [out_dir / name for name in GENERATED_FILES]
    for path in produced:
        if not path.is_file():
            raise RuntimeError(f"protoc did not produce {path}")
        _check_imports(path)
    return produced


def main() -> int:
    for path in generate(REPO_ROOT):
        print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
