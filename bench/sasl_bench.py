"""What SASL costs at connection time: a 1-broker cluster of real processes whose Kafka
listener is SASL_PLAINTEXT (PLAIN from its JAAS users, SCRAM-SHA-256/512 from ZooKeeper),
measured with a minimal client speaking Kafka's protocol (tests.kafka_wire's frames): the
latency of a connect plus ApiVersions (what a plaintext client does before its first request)
and of the same plus the SASL exchange librdkafka makes (SaslHandshake v1, then one
SaslAuthenticate for PLAIN, two for SCRAM) for each mechanism. SCRAM's cost is PBKDF2 on the
client side (the salted password from the iterations the server names) and two HMAC/hash
checks on the broker's (it keeps only the stored and server keys).

    python -m bench.sasl_bench [--handshakes 200] [--iterations 4096]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kafkasim.cluster.local import LocalCluster
from kafkasim.common.sasl import jaas_config, plain_message
from kafkasim.common.scram import MECHANISMS, ScramClient
from kafkasim.node.kafka_apis import SASL_AUTHENTICATE, SASL_HANDSHAKE
from tests.kafka_wire import API_VERSIONS, read_response, request_frame, sized

USER, PASSWORD = "bench", "bench-secret"
_SIZE = struct.Struct(">i")
Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _request(conn: Conn, api_key: int, version: int, **values: object) -> Any:
    reader, writer = conn
    writer.write(sized(request_frame(api_key, version, 1, "sasl-bench", **values)))
    await writer.drain()
    (size,) = _SIZE.unpack(await reader.readexactly(4))
    return read_response(await reader.readexactly(size), api_key, version)[1]


async def _connect(host: str, port: int, mechanism: str | None) -> None:
    conn = await asyncio.open_connection(host, port)
    try:
        await _request(conn, API_VERSIONS, 3, client_software_name="b", client_software_version="1")
        if mechanism is None:
            return
        await _request(conn, SASL_HANDSHAKE, 1, mechanism=mechanism)
        if mechanism == "PLAIN":
            answer = await _request(
                conn, SASL_AUTHENTICATE, 2, auth_bytes=plain_message(USER, PASSWORD)
            )
        else:
            client = ScramClient(MECHANISMS[mechanism], USER, PASSWORD)
            first = await _request(conn, SASL_AUTHENTICATE, 2, auth_bytes=client.first())
            final = client.final(first.auth_bytes)
            answer = await _request(conn, SASL_AUTHENTICATE, 2, auth_bytes=final)
            client.check(answer.auth_bytes)
        if answer.error_code != 0:
            raise RuntimeError(f"{mechanism}: {answer.error_message}")
    finally:
        conn[1].close()


def _latencies_ms(host: str, port: int, count: int, mechanism: str | None) -> list[float]:
    async def run() -> list[float]:
        out: list[float] = []
        for _ in range(count):
            start = time.perf_counter()
            await _connect(host, port, mechanism)
            out.append((time.perf_counter() - start) * 1000)
        return out

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--handshakes", type=int, default=200)
    parser.add_argument("--iterations", type=int, default=4096)
    args = parser.parse_args()
    props: dict[str, object] = {
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,KAFKA:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.kafka.plain.sasl.jaas.config": jaas_config(
            "PLAIN", USER, PASSWORD, **{USER: PASSWORD}
        ),
        "offsets.topic.replication.factor": 1,
    }
    with tempfile.TemporaryDirectory() as root:
        cluster = LocalCluster(Path(root), brokers=1, broker_props=props)
        cluster.start()
        try:
            credentials = ",".join(
                f"{m}=[iterations={args.iterations},password={PASSWORD}]"
                for m in ("SCRAM-SHA-256", "SCRAM-SHA-512")
            )
            subprocess.run(
                [sys.executable, "-m", "kafkasim.cli", "configs", "--zookeeper",
                 cluster.zookeeper.connect_string, "--entity-type", "users", "--entity-name",
                 USER, "--alter", "--add-config", credentials],
                check=True, capture_output=True,
            )  # fmt: skip
            time.sleep(1)  # the notification reaches the broker
            host, port = cluster.kafka_bootstrap.rsplit(":", 1)
            baseline = 0.0
            for mechanism in (None, "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
                name = f"SASL {mechanism}" if mechanism else "connect + ApiVersions"
                _latencies_ms(host, int(port), 5, mechanism)  # warm-up
                values = _latencies_ms(host, int(port), args.handshakes, mechanism)
                median = statistics.median(values)
                p99 = sorted(values)[int(len(values) * 0.99) - 1]
                baseline = baseline or median
                print(
                    f"{name:26s} median {median:7.2f} ms  p99 {p99:7.2f} ms  "
                    f"({median / baseline:5.1f}x connect + ApiVersions)"
                )
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
