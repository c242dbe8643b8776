"""`kafkasim ... | head`: a tool whose reader went away stops quietly (no "[Errno 32] Broken
pipe"), and `sim run` still writes its history and report files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.cli_run import ROOT


def _read_one_line_and_close(*args: str) -> tuple[int, str]:
    """Run ``kafkasim ARGS``, read its first line, close the pipe (as ``head -1`` does);
    its exit status and stderr."""
    with subprocess.Popen(
        [sys.executable, "-m", "kafkasim.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        first = process.stdout.readline()
        assert first, "no output at all"
        process.stdout.close()
        err = process.stderr.read()
        return process.wait(timeout=300), err


def test_a_listing_into_a_closed_pipe_exits_quietly() -> None:
    code, err = _read_one_line_and_close("sim", "list")
    assert err == ""
    assert code in (0, 141)  # 141: as a tool ended by SIGPIPE, when a line was still unread


def test_sim_run_into_a_closed_pipe_still_writes_its_files(tmp_path: Path) -> None:
    history, report = tmp_path / "h.jsonl", tmp_path / "r.html"
    code, err = _read_one_line_and_close(
        "sim", "run", "controller-crash", "--seed", "1",
        "--history", str(history), "--report", str(report),
    )  # fmt: skip
    assert err == ""
    assert code == 0  # the verdict's status, not a pipe error
    assert history.stat().st_size > 0
    assert "<html" in report.read_text().lower()
