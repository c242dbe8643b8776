"""The live console's cost (issue 16), measured side by side in one run.

A 3-broker local cluster (RF=3, acks=all, min.insync.replicas=2, 1 KiB records batched 16 to
a request, 8 requests in flight: ``cluster_bench``'s produce load; 6,000 requests, ~4 s, a
repetition, so that each spans several of the console's one-second polls). Repetitions alternate
"without a console" and "with a console attached": ``kafkasim console --dir`` in its own
process polling the cluster, and a page (another process) reading its event stream. Printed:

* produce MB/s of each repetition, the medians and their ratio (with / without; the aim is
  >= 0.95: the console must not slow produce by more than 5 %);
* the console's own load on the brokers: the requests it sent (gRPC calls and metrics
  scrapes, the poller's count) per second, and the brokers' own request counters over an
  idle window, with and without it;
* page update latency: how old each view was when the page received it (median, p99), and
  the updates per second.

Real processes on loopback; every process started here is stopped here, by pid. Run:
``python -m bench.console_bench [--quick]`` or ``./dev bench console``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.cluster_bench import _batch, _cluster, _produce_unary
from kafkasim.cluster.compose_secure import STATE_FILE
from kafkasim.cluster.local import REPO_ROOT, LocalCluster
from kafkasim.common.types import TopicPartition
from kafkasim.console.live import parse_metrics

WINDOW = 8
TOPIC = "bench"


def _python(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )


def _stop(process: subprocess.Popen[str]) -> str:
    process.terminate()
    try:
        out, _ = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
    return out


class Attached:
    """A console process over the cluster in ``root`` and a page process reading its events."""

    def __init__(self, root: Path) -> None:
        self.console = _python("-m", "kafkasim.cli", "console", "--dir", str(root),
                               "--bind", "127.0.0.1:0")  # fmt: skip
        assert self.console.stdout is not None
        line = self.console.stdout.readline()
        if "http://" not in line:
            _stop(self.console)
            raise RuntimeError(f"the console did not start: {line!r}")
        self.url = line.split("http://", 1)[1].split()[0].rstrip("/")
        self.page = _python("-m", "bench.console_bench", "--page", f"http://{self.url}")
        assert self.page.stdout is not None
        if self.page.stdout.readline().strip() != "live":  # two updates seen: polling
            self.close()
            raise RuntimeError("the page saw no updates")

    def close(self) -> dict[str, Any]:
        out = _stop(self.page)
        _stop(self.console)
        lines = [x for x in out.splitlines() if x.startswith("{")]
        return json.loads(lines[-1]) if lines else {}


def _page(url: str) -> None:
    """The page: reads ``/api/events`` until terminated, then prints what it saw (JSON)."""
    ages: list[int] = []
    first: tuple[float, int] | None = None
    last: tuple[float, int] | None = None

    def done(*_: object) -> None:
        figures: dict[str, Any] = {"updates": len(ages)}
        if ages:
            ordered = sorted(ages)
            figures["age_median_ms"] = statistics.median(ordered)
            figures["age_p99_ms"] = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        if first is not None and last is not None and last[0] > first[0]:
            span = last[0] - first[0]
            figures["requests_per_s"] = (last[1] - first[1]) / span
            figures["updates_per_s"] = (len(ages) - 1) / span
        print(json.dumps(figures), flush=True)
        os._exit(0)

    signal.signal(signal.SIGTERM, done)
    with urllib.request.urlopen(f"{url}/api/events") as stream:
        for raw in stream:
            line = raw.decode()
            if not line.startswith("data: "):
                continue
            view = json.loads(line[len("data: ") :])
            if "time_ms" not in view:
                continue
            now = time.time()
            ages.append(int(now * 1000) - view["time_ms"])
            last = (now, view.get("console_requests", 0))
            if first is None:
                first = last
            if len(ages) == 2:
                print("live", flush=True)


def _broker_requests(cluster: LocalCluster) -> int:
    total = 0
    for broker in cluster.brokers.values():
        assert broker.metrics_url is not None
        with urllib.request.urlopen(broker.metrics_url, timeout=5) as answer:
            total += parse_metrics(answer.read().decode()).requests
    return total


def _idle_rate(cluster: LocalCluster, seconds: float) -> float:
    """Requests/s the brokers counted over ``seconds`` of no produce load (the scrapes made
    here to read the counters add one per broker each time)."""
    before = _broker_requests(cluster)
    time.sleep(seconds)
    return (_broker_requests(cluster) - before) / seconds


async def run(quick: bool) -> None:
    batch = _batch()
    count = 400 if quick else 6000
    reps = 3 if quick else 5
    idle_s = 3.0 if quick else 6.0
    tp = TopicPartition(TOPIC, 0)
    print(
        f"kafkasim console benchmark{' (quick)' if quick else ''}: 3 brokers, RF=3, acks=all, "
        f"{count} requests of 16 x 1 KiB, {WINDOW} in flight; {reps} repetitions each way, "
        "interleaved"
    )
    with tempfile.TemporaryDirectory(prefix="kafkasim-bench-") as tmp:
        root = Path(tmp)
        cluster, client = await _cluster(root, 3, TOPIC, 3, {"min.insync.replicas": "2"})
        (root / STATE_FILE).write_text(json.dumps(cluster.state()))
        bare: list[float] = []
        attached: list[float] = []
        pages: list[dict[str, Any]] = []
        idle_with: list[float] = []
        idle_without: list[float] = []
        try:
            await _produce_unary(client, tp, batch, count=count // 4, window=WINDOW, acks=-1)
            for rep in range(reps):
                for with_console in (rep % 2 == 1, rep % 2 == 0):
                    if not with_console:
                        idle_without.append(await asyncio.to_thread(_idle_rate, cluster, idle_s))
                        mbs = await _produce_unary(
                            client, tp, batch, count=count, window=WINDOW, acks=-1
                        )
                        bare.append(mbs)
                        print(f"   rep {rep + 1} without a console  {mbs:7.2f} MB/s")
                        continue
                    console = await asyncio.to_thread(Attached, root)
                    try:
                        idle_with.append(await asyncio.to_thread(_idle_rate, cluster, idle_s))
                        mbs = await _produce_unary(
                            client, tp, batch, count=count, window=WINDOW, acks=-1
                        )
                    finally:
                        pages.append(await asyncio.to_thread(console.close))
                    attached.append(mbs)
                    print(f"   rep {rep + 1} with a console     {mbs:7.2f} MB/s")
        finally:
            await client.transport.close()
            cluster.stop()
    without, with_ = statistics.median(bare), statistics.median(attached)
    print("\n1. produce throughput (medians)")
    print(f"   without a console  {without:7.2f} MB/s")
    print(f"   with a console     {with_:7.2f} MB/s   ratio {with_ / without:.3f} (aim >= 0.95)")
    print("\n2. the console's load on the brokers")
    own = [p["requests_per_s"] for p in pages if "requests_per_s" in p]
    if own:
        print(f"   requests it sent (gRPC + metrics scrapes): {statistics.median(own):.1f}/s")
    seen = statistics.median(idle_with) - statistics.median(idle_without)
    print(
        f"   brokers' request counters when idle: {statistics.median(idle_with):.1f}/s with, "
        f"{statistics.median(idle_without):.1f}/s without (difference {seen:.1f}/s)"
    )
    print("\n3. page update latency (age of each view when the page received it)")
    medians = [p["age_median_ms"] for p in pages if "age_median_ms" in p]
    p99s = [p["age_p99_ms"] for p in pages if "age_p99_ms" in p]
    rates = [p["updates_per_s"] for p in pages if "updates_per_s" in p]
    if medians:
        print(
            f"   median {statistics.median(medians):.0f} ms, p99 {max(p99s):.0f} ms, "
            f"{statistics.median(rates):.2f} updates/s"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--page", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.page is not None:
        _page(args.page)
        return 0
    asyncio.run(run(args.quick))
    return 0


if __name__ == "__main__":
    sys.exit(main())
