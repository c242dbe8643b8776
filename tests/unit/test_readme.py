"""The README's Python example runs as written (on a temporary directory)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_example_runs(tmp_path: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert blocks, "README has no python example"
    for block in blocks:
        code = block.replace('"/tmp/logs/', f'"{tmp_path}/')
        namespace: dict[str, object] = {}
        exec(compile(code, str(README), "exec"), namespace)
        records = namespace["records"]
        assert [r.value for r in records] == [b"hello"]  # type: ignore[attr-defined]
