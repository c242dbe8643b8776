"""``examples/spark_windowed_counts.py`` end to end, run as a user runs it: a subprocess with
``PYSPARK_PYTHON`` and ``PYTHONPATH`` set (``spark/README.md``), ``--available-now``, against
a real local cluster; the counts it writes are read back with the project's consumer and
compared exactly with the counts of the records produced.

How the data makes the assertions exact. The example counts in tumbling 1-minute windows with a
watermark of 1 minute, in append mode: Spark writes a window once the watermark (the largest
event time of the *previous* micro-batches, minus 1 minute) has passed the window's end, and
drops records older than the watermark. So each run ends with a record far in the future (an
hour later): the watermark moves past every earlier window, closing them, while the future
record's own window stays open. Under ``Trigger.AvailableNow`` Spark (≥ 3.3; 4.3 here) reads
everything in the first micro-batch, then, the watermark having moved, runs one more micro-batch
without data that emits the windows it closed; the query then stops. One run therefore writes
every closed window: no second run is needed for that.

The test does run the example a second time, with the same checkpoint, after producing more
records, as a restarted pipeline: the second run must write only the windows closed since (one
holds the first run's future record, kept in the state store across the restart), never again
the windows already written, and must drop a record that arrives after its window was written.

The subprocess runs in a time zone other than UTC (``TZ``): the window bounds it writes say
``Z`` and must be UTC whatever the machine's zone.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from kafkasim.client.consumer import Consumer
from kafkasim.cluster.local import REPO_ROOT, LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.common.types import TopicPartition
from tests.spark.conftest import ToSend, bootstrap, create_topic, produce

# Generous: the example starts a JVM and runs micro-batches of 200 tasks on 2 shared cores.
RUN_TIMEOUT_S = 300
MINUTE_MS = 60_000
KEYS = ("k0", "k1", "k2", "k3")
# Where in its window each record of a (window, key) falls: both bounds of the window first.
IN_WINDOW_MS = (0, MINUTE_MS - 1, 30_000, 15_000, 45_000)
# Not UTC, and not a whole number of hours from it.
NON_UTC_ZONE = "Asia/Kolkata"

Window = tuple[str, str]  # (window_start, window_end) as the example writes them
Counts = dict[tuple[Window, str], int]


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _window(ms: int) -> Window:
    start = ms - ms % MINUTE_MS
    return _iso(start), _iso(start + MINUTE_MS)


def _records(base_ms: int, minutes: range) -> list[ToSend]:
    """1 to 5 records per key in each window ``base_ms + minute``, a count different for
    each key of a window, at both bounds of the window and in between."""
    records = []
    for minute in minutes:
        for k, key in enumerate(KEYS):
            count = 1 + (minute + 2 * k) % len(IN_WINDOW_MS)
            for offset in IN_WINDOW_MS[:count]:
                ts = base_ms + minute * MINUTE_MS + offset
                records.append(ToSend(f"{key}@{ts}".encode(), key=key.encode(), timestamp_ms=ts))
    return records


def _counts(records: list[ToSend]) -> Counts:
    counted = Counter((_window(r.timestamp_ms or 0), (r.key or b"").decode()) for r in records)
    return dict(counted)


def _run_example(cluster: LocalCluster, input_topic: str, output: str, checkpoint: Path) -> None:
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYTHONPATH": str(REPO_ROOT),
        "TZ": NON_UTC_ZONE,
    }
    command = [
        sys.executable,
        "examples/spark_windowed_counts.py",
        "--bootstrap-server",
        bootstrap(cluster),
        "--input",
        input_topic,
        "--output",
        output,
        "--checkpoint",
        str(checkpoint),
        "--master",
        "local[2]",
        "--available-now",
        "--window",
        "1 minute",
        "--shuffle-partitions",
        "2",
    ]
    done = subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"the example exited with {done.returncode}:\n{done.stderr}"


def _read_counts(cluster: LocalCluster, topic: str) -> list[tuple[bytes | None, Window, str, int]]:
    """Every record of ``topic``, up to its end offsets now: (record key, window, key, count)."""

    async def main() -> list[tuple[bytes | None, Window, str, int]]:
        transport = GrpcTransport()
        try:
            config = {"bootstrap.servers": bootstrap(cluster), "auto.offset.reset": "earliest"}
            async with Consumer(config, transport=transport, clock=SystemClock()) as consumer:
                partitions = [
                    TopicPartition(topic, p) for p in await consumer.partitions_for(topic)
                ]
                consumer.assign(partitions)
                ends = await consumer.end_offsets(partitions)
                got = []
                deadline = time.monotonic() + RUN_TIMEOUT_S
                while any((consumer.position(tp) or 0) < end for tp, end in ends.items()):
                    assert time.monotonic() < deadline, f"{topic} not read to its end"
                    for r in await consumer.poll(500):
                        assert r.value is not None
                        doc = json.loads(r.value)
                        window = (doc["window_start"], doc["window_end"])
                        got.append((r.key, window, doc["key"], doc["count"]))
                return got
        finally:
            await transport.close()

    return asyncio.run(main())


def test_the_example_writes_each_closed_window_once_with_its_exact_counts(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    create_topic(cluster, "clicks", partitions=3)
    create_topic(cluster, "click-counts", partitions=3)
    checkpoint = tmp_path / "checkpoint"
    rng = random.Random(7)
    # Minute-aligned, recent (retention keeps it), and UTC-minute windows are epoch-aligned.
    base_ms = (SystemClock().time_ms() // MINUTE_MS - 10) * MINUTE_MS

    # Run 1: windows base+0..3 min, then a record an hour later that closes them.
    first = _records(base_ms, range(4))
    rng.shuffle(first)  # windows interleaved in each partition, as event time goes
    future = ToSend(b"future", key=b"k0", timestamp_ms=base_ms + 60 * MINUTE_MS)
    produce(cluster, "clicks", [*first, future])
    _run_example(cluster, "clicks", "click-counts", checkpoint)

    expected_first = _counts(first)
    got = _read_counts(cluster, "click-counts")
    assert sorted((w, k, c) for _, w, k, c in got) == sorted(
        (w, k, c) for (w, k), c in expected_first.items()
    )
    assert all(record_key == key.encode() for record_key, _, key, _ in got)

    # Run 2, restarted from the checkpoint: windows base+60..62 min (base+60 also holds the
    # first run's future record), a record for an already written window (dropped: older than
    # the watermark), and a record another hour later that closes the new windows.
    second = _records(base_ms, range(60, 63))
    rng.shuffle(second)
    too_late = ToSend(b"too-late", key=b"k1", timestamp_ms=base_ms + 2 * MINUTE_MS)
    further = ToSend(b"future", key=b"k0", timestamp_ms=base_ms + 120 * MINUTE_MS)
    produce(cluster, "clicks", [too_late, *second, further])
    _run_example(cluster, "clicks", "click-counts", checkpoint)

    expected_second = _counts([*second, future])
    got = _read_counts(cluster, "click-counts")
    assert sorted((w, k, c) for _, w, k, c in got) == sorted(
        (w, k, c) for (w, k), c in [*expected_first.items(), *expected_second.items()]
    )
    assert all(record_key == key.encode() for record_key, _, key, _ in got)
