"""A small failover scenario, with a consumer group, that prints a hash of everything it
observed (log lines, the final ZooKeeper tree, the virtual time). Run by test_determinism in
fresh processes."""

from __future__ import annotations

import hashlib
import logging
import sys
import tempfile
from pathlib import Path

from kafkasim.client.consumer import Consumer
from kafkasim.common.types import TopicPartition
from kafkasim.sim.cluster import SimCluster, broker_address
from kafkasim.sim.loop import run_simulation
from kafkasim.sim.network import SimTransport


def main(seed: int) -> str:
    with tempfile.TemporaryDirectory(prefix="kafkasim-trace-") as tmp:
        return _run(Path(tmp), seed)


def _run(root: Path, seed: int) -> str:
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(f"{record.name}: {record.getMessage()}".replace(str(root), "ROOT"))

    logging.getLogger().addHandler(Collect())
    logging.getLogger().setLevel(logging.INFO)

    async def scenario() -> None:
        cluster = SimCluster(root, brokers=3, seed=seed)
        await cluster.start()
        await cluster.wait_for(lambda: cluster.controller_id() > 0)
        client = cluster.client()
        await client.create_topic("t", 3, 3, {"min.insync.replicas": "2"})
        await client.wait_for_leaders("t", 3)
        for i in range(15):
            await client.produce(TopicPartition("t", i % 3), [b"v%d" % i])
        # A consumer group (member ids come from the brokers' seeded randomness).
        transport = SimTransport(cluster.network, "member")
        consumer = Consumer(
            {
                "bootstrap.servers": ",".join(broker_address(b) for b in cluster.broker_ids),
                "group.id": "trace",
                "client.id": "member",
                "auto.offset.reset": "earliest",
            },
            transport=transport,
            clock=cluster.clock,
        )
        consumer.subscribe(["t"])
        read = 0
        while read < 15:
            read += len(await consumer.poll(1000))
        await consumer.close()
        await transport.close()
        await cluster.crash(cluster.controller_id())
        for i in range(15):
            await client.produce(TopicPartition("t", i % 3), [b"w%d" % i])
        lines.append(repr(sorted((p, d) for p, (d, _) in cluster.zk_server.snapshot().items())))
        lines.append(repr(cluster.loop.time()))
        await cluster.stop()

    run_simulation(scenario(), time_limit_s=3600)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


if __name__ == "__main__":
    print(main(int(sys.argv[1])))
