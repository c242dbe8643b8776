"""What TLS costs: the same 1-broker cluster of real processes run plaintext and with mutual TLS
(``LocalCluster(tls=True)``), measured with confluent-kafka's producer on the Kafka listener
(records/s, acks=1) and kafkasim's producer over gRPC, plus the TCP (+TLS handshake) connect
latency of the Kafka listener. Prints one line per figure and the TLS/plaintext ratios.

    python -m bench.tls_bench [--records 200000] [--size 100]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer

from kafkasim.client.producer import Producer as SimProducer
from kafkasim.client.simple import MinimalClient
from kafkasim.cluster.local import LocalCluster
from kafkasim.common.clock import SystemClock
from kafkasim.common.rpc_grpc_client import client_transport
from kafkasim.common.tls import client_tls

HANDSHAKES = 200


def _create_topic(cluster: LocalCluster, topic: str) -> None:
    async def main() -> None:
        transport = client_transport(cluster.client_properties())
        try:
            client = MinimalClient(transport, cluster.bootstrap, SystemClock())
            await client.create_topic(topic, 1, 1)
            await client.wait_for_leaders(topic, 1)
        finally:
            await transport.close()

    asyncio.run(main())


def confluent_rate(cluster: LocalCluster, topic: str, records: int, size: int) -> float:
    config: dict[str, object] = {"bootstrap.servers": cluster.kafka_bootstrap, "acks": "1"}
    if cluster.tls:
        certs = cluster.certs_dir
        config |= {
            "security.protocol": "SSL",
            "ssl.ca.location": str(certs / "ca.crt"),
            "ssl.certificate.location": str(certs / "admin.crt"),
            "ssl.key.location": str(certs / "admin.key"),
        }
    producer = Producer(config)
    producer.produce(topic, b"warm-up")
    producer.flush(30)
    value = b"x" * size
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return records / (time.perf_counter() - start)


def kafkasim_rate(cluster: LocalCluster, topic: str, records: int, size: int) -> float:
    config = {
        "bootstrap.servers": ",".join(cluster.bootstrap),
        "acks": "1",
        **cluster.client_properties(),
    }

    async def main() -> float:
        transport = client_transport(config)
        producer = SimProducer(config, transport=transport, clock=SystemClock())
        try:
            await producer.send(topic, b"warm-up")
            value = b"x" * size
            start = time.perf_counter()
            for i in range(records):
                producer.send(topic, value)
                if i % 1000 == 999:
                    await asyncio.sleep(0)
            await producer.flush()
            return records / (time.perf_counter() - start)
        finally:
            await producer.close()
            await transport.close()

    return asyncio.run(main())


def handshake_ms(cluster: LocalCluster) -> float:
    """Median time to connect to the Kafka listener (and finish the TLS handshake)."""
    host, port = cluster.kafka_bootstrap.split(",")[0].rsplit(":", 1)
    tls = client_tls(cluster.client_properties())
    context = tls.client_context() if tls is not None else None
    times: list[float] = []
    for _ in range(HANDSHAKES):
        start = time.perf_counter()
        with socket.create_connection((host, int(port))) as sock:
            if context is not None:
                # The client's side of the handshake (TLS 1.3: the server checks the client
                # certificate after this, while the client already sends).
                with context.wrap_socket(sock, server_hostname=host):
                    pass
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def run(records: int, size: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for tls in (False, True):
        with tempfile.TemporaryDirectory() as root:
            cluster = LocalCluster(
                Path(root), brokers=1, broker_props={"metrics.port": -1}, tls=tls
            )
            cluster.start()
            try:
                _create_topic(cluster, "bench")
                name = "tls" if tls else "plaintext"
                out[name] = {
                    "confluent_rps": confluent_rate(cluster, "bench", records, size),
                    "kafkasim_rps": kafkasim_rate(cluster, "bench", records // 4, size),
                    "connect_ms": handshake_ms(cluster),
                }
            finally:
                cluster.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    results = run(args.records, args.size)
    for name, figures in results.items():
        print(
            f"{name:9s} confluent-kafka {figures['confluent_rps']:10.0f} rec/s  "
            f"kafkasim {figures['kafkasim_rps']:9.0f} rec/s  "
            f"connect {figures['connect_ms']:.2f} ms"
        )
    plain, tls = results["plaintext"], results["tls"]
    confluent = tls["confluent_rps"] / plain["confluent_rps"]
    kafkasim = tls["kafkasim_rps"] / plain["kafkasim_rps"]
    print(
        f"TLS/plaintext throughput: confluent-kafka {confluent:.2f}, kafkasim {kafkasim:.2f}; "
        f"connect {tls['connect_ms']:.2f} ms vs {plain['connect_ms']:.2f} ms"
    )


if __name__ == "__main__":
    main()
