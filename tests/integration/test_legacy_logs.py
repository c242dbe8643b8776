"""Broker processes started on partition directories written before Kafka 0.11 (message
formats v0 and v1, gzip wrappers among them), with v2 batches produced after them:
``console-consumer`` prints every record with its offset, key, value and timestamp, as Kafka's
prints a partition upgraded from those versions."""

from __future__ import annotations

import asyncio
import shutil
import signal
from pathlib import Path

from kafkasim.client.simple import MinimalClient
from kafkasim.cluster.local import LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.rpc_grpc_client import GrpcTransport
from kafkasim.common.types import TopicPartition
from tests.cli_run import kafkasim
from tests.unit.storage.legacy_logs import T0, write_legacy_partition

MAGICS = (0, 1)


def _topic(magic: int) -> str:
    return f"old-v{magic}"


async def _create(bootstrap: list[str]) -> dict[int, int]:
    """One RF-1 topic per legacy format; the broker hosting each."""
    transport = GrpcTransport()
    try:
        client = MinimalClient(transport, bootstrap, SystemClock())
        leaders: dict[int, int] = {}
        for magic in MAGICS:
            await client.create_topic(_topic(magic), 1, 1)
            await client.wait_for_leaders(_topic(magic), 1)
            leaders[magic] = client.metadata.leader(TopicPartition(_topic(magic), 0))
        return leaders
    finally:
        await transport.close()


async def _produce_v2(bootstrap: list[str]) -> list[int]:
    """Two v2 records after each legacy log, once its broker leads it again; their offsets."""
    transport = GrpcTransport()
    try:
        client = MinimalClient(transport, bootstrap, SystemClock())
        offsets: list[int] = []
        for magic in MAGICS:
            await client.wait_for_leaders(_topic(magic), 1)
            result = await client.produce(
                TopicPartition(_topic(magic), 0), [b"new-0", b"new-1"], keys=[b"n0", b"n1"]
            )
            assert result.ok, result
            offsets.append(result.base_offset)
        return offsets
    finally:
        await transport.close()


def test_console_consumer_prints_legacy_then_v2_records(
    local_cluster: LocalCluster, tmp_path: Path
) -> None:
    leaders = asyncio.run(_create(local_cluster.bootstrap))
    written: dict[int, list[tuple[int, bytes]]] = {}
    for broker_id in sorted(set(leaders.values())):
        local_cluster.kill(broker_id, signal.SIGTERM)
    for magic, broker_id in leaders.items():
        partition_dir = local_cluster.brokers[broker_id].data_dir / "logs" / f"{_topic(magic)}-0"
        for path in partition_dir.iterdir():
            if path.suffix in (".log", ".index", ".timeindex"):
                path.unlink()
        prepared = tmp_path / f"legacy-v{magic}"
        written[magic] = write_legacy_partition(prepared, magic=magic)
        for path in prepared.iterdir():
            shutil.copy(path, partition_dir / path.name)
    for broker_id in sorted(set(leaders.values())):
        local_cluster.start_broker(broker_id)
        local_cluster.wait_serving(broker_id)
    new_offsets = asyncio.run(_produce_v2(local_cluster.bootstrap))
    assert new_offsets == [len(written[m]) for m in MAGICS]

    for magic in MAGICS:
        legacy_ts = [
            "NO_TIMESTAMP" if magic == 0 else f"CreateTime:{T0 + o}" for o, _ in written[magic]
        ]
        expected_legacy = [
            f"{ts}|Offset:{o}|k{o}|{v.decode()}"
            for ts, (o, v) in zip(legacy_ts, written[magic], strict=True)
        ]
        total = len(written[magic]) + 2
        out = kafkasim(
            "console-consumer",
            "--bootstrap-server",
            ",".join(local_cluster.bootstrap),
            "--topic",
            _topic(magic),
            "--from-beginning",
            "--max-messages",
            str(total),
            "--timeout-ms",
            "30000",
            "--property",
            "print.timestamp=true",
            "--property",
            "print.offset=true",
            "--property",
            "print.key=true",
            "--property",
            "key.separator=|",
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[:-2] == expected_legacy
        end = len(written[magic])
        assert [line.split("|", 1)[1] for line in lines[-2:]] == [
            f"Offset:{end}|n0|new-0",
            f"Offset:{end + 1}|n1|new-1",
        ]
        assert all(line.startswith("CreateTime:") for line in lines[-2:])
        assert out.stderr.endswith(f"Processed a total of {total} messages\n")

        # From offset 2, inside the gzip wrapper of offsets 1-3: 1 is skipped.
        out = kafkasim(
            "console-consumer",
            "--bootstrap-server",
            ",".join(local_cluster.bootstrap),
            "--topic",
            _topic(magic),
            "--partition",
            "0",
            "--offset",
            "2",
            "--max-messages",
            "3",
            "--timeout-ms",
            "30000",
            "--property",
            "print.offset=true",
            timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == [
            f"Offset:{o}\t{v.decode()}" for o, v in written[magic][2:5]
        ]
