"""The poller's count of its own load: every request it sends a broker counts, a metrics
scrape too (whether or not the broker answers)."""

from __future__ import annotations

import asyncio

from kafkasim.console.live import Poller, StaticTarget
from kafkasim.console.model import BrokerState
from kafkasim.controller.zk_process import free_loopback_port


def test_a_metrics_scrape_counts_as_a_request_to_the_broker() -> None:
    poller = Poller(StaticTarget(["127.0.0.1:1"]))
    url = f"http://127.0.0.1:{free_loopback_port()}/metrics"  # nothing listens there
    brokers = [BrokerState(1, "127.0.0.1:1", metrics_url=url), BrokerState(2, "127.0.0.1:2")]
    found = asyncio.run(poller._metrics(brokers))
    assert found == {}
    assert poller.requests == 1  # broker 2 has no metrics endpoint: nothing sent
