"""cluster_bench section 1's CPU reading: the user plus system time of a process, from /proc,
growing with the work it does (the broker's and the sink's CPU per MB are computed from it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench.cluster_bench import cpu_seconds


def test_cpu_seconds_grows_with_the_work_a_process_does() -> None:
    before = cpu_seconds(os.getpid())
    deadline = time.process_time() + 0.2
    while time.process_time() < deadline:
        pass
    assert cpu_seconds(os.getpid()) - before >= 0.1


def test_cpu_seconds_reads_another_process() -> None:
    busy = (
        "import time\nend = time.process_time() + 0.3\n"
        "while time.process_time() < end: pass\ntime.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", busy])
    try:
        while cpu_seconds(child.pid) < 0.25:
            assert child.poll() is None
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait()
