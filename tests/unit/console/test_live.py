"""The poller's count of its own load: every request it sends a broker counts, a metrics
scrape too (whether or not the broker answers)."""

from __future__ import annotations

import asyncio
import http.server
import threading
import urllib.parse
from pathlib import Path

from prometheus_client import generate_latest

from kafkasim.common.types import TopicPartition
from kafkasim.console.live import SCRAPED_SERIES, Poller, StaticTarget, parse_metrics
from kafkasim.console.model import BrokerState
from kafkasim.controller.zk_process import free_loopback_port
from kafkasim.sim.cluster import SimCluster
from tests.sim.helpers import create, leader_of, produce_all, simulate

TP = TopicPartition("t", 0)


def test_a_metrics_scrape_counts_as_a_request_to_the_broker() -> None:
    poller = Poller(StaticTarget(["127.0.0.1:1"]))
    url = f"http://127.0.0.1:{free_loopback_port()}/metrics"  # nothing listens there
    brokers = [BrokerState(1, "127.0.0.1:1", metrics_url=url), BrokerState(2, "127.0.0.1:2")]
    found = asyncio.run(poller._metrics(brokers))
    assert found == {}
    assert poller.requests == 1  # broker 2 has no metrics endpoint: nothing sent


def test_the_series_a_scrape_asks_for_read_the_same_counters_as_the_whole_exposition(
    tmp_path: Path,
) -> None:
    """A scrape asks a broker only for ``SCRAPED_SERIES`` (the console's own cost, issue 16):
    on a broker that served produce and fetch, those series read the same counters as the
    whole exposition, from a body a fraction of its size."""

    async def scenario(cluster: SimCluster) -> tuple[bytes, bytes]:
        client = await create(cluster, "t")
        acked = await produce_all(client, TP, [b"record-%d" % i for i in range(5)])
        assert len(acked) == 5
        await client.read_all(TP)
        leader = cluster.brokers[leader_of(cluster, TP)]
        registry = leader.metrics.registry
        return generate_latest(registry), generate_latest(
            registry.restricted_registry(SCRAPED_SERIES)
        )

    full, only = simulate(tmp_path, scenario)
    expected = parse_metrics(full.decode())
    assert expected.produce_requests == 5 and expected.bytes_in > 0 and expected.bytes_out > 0
    assert expected.total_time_ms > 0
    assert parse_metrics(only.decode()) == expected
    assert len(only) * 5 < len(full)


def test_the_poller_scrapes_with_the_series_query() -> None:
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = b'kafka_network_requestmetrics_requests_total{request="Produce"} 4.0\n'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        found = asyncio.run(
            Poller(StaticTarget([]))._metrics([BrokerState(1, "a:1", metrics_url=url)])
        )
    finally:
        server.shutdown()
        server.server_close()
    assert found[1].produce_requests == 4
    path, query = asked[0].split("?")
    assert path == "/metrics"
    assert urllib.parse.parse_qs(query) == {"name[]": list(SCRAPED_SERIES)}
