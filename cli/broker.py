"""``kafkasim broker --config server.properties``: run one broker process.

Real ports: gRPC (``node/rpc_grpc.py``), ZooKeeper through kazoo (``controller/zk_kazoo.py``),
the system clock. SIGTERM or SIGINT starts a controlled shutdown (leadership moves away
first), then the process exits 0. ``--override key=value`` changes single keys.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import signal
from pathlib import Path
from typing import Any

from kafkasim.common.clock import SystemClock
from kafkasim.common.config import read_properties
from kafkasim.controller.zk_kazoo import KazooCoordination
from kafkasim.node.broker import Broker, controller_factory
from kafkasim.node.broker_id import resolve_broker_id
from kafkasim.node.config import BrokerConfig
from kafkasim.node.fetcher_wire import FOLLOWER_DECODERS
from kafkasim.node.gc_tuning import freeze_startup_objects
from kafkasim.node.loop_idle import idle_timing_loop
from kafkasim.node.malloc_tuning import tune_malloc
from kafkasim.node.produce_wire import PRODUCE_DECODERS
from kafkasim.node.rpc_framed import FramedTransport
from kafkasim.node.rpc_grpc import GrpcBrokerTransport
from kafkasim.node.zk_security import zk_security_for
from kafkasim.storage.checkpoint_writer import BackgroundCheckpointWriter
from kafkasim.storage.records.crc import load_folding

logger = logging.getLogger(__name__)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "broker", help="run a broker (server.properties with Kafka's keys)"
    )
    p.add_argument("--config", type=Path, required=True, help="server.properties file")
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one config key (repeatable)",
    )
    p.set_defaults(func=run)


def load_config(path: Path, overrides: list[str]) -> BrokerConfig:
    if not path.is_file():
        raise ValueError(f"config file {path} does not exist")
    props: dict[str, object] = dict(read_properties(path))
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--override expects KEY=VALUE, got {item!r}")
        props[key.strip()] = value.strip()
    return BrokerConfig.from_props(props)


def _halt(reason: str) -> None:
    """Kafka's Exit.halt(1) after a fatal storage failure: no shutdown hooks, no controlled
    shutdown (the broker already logged why)."""
    del reason
    logging.shutdown()
    os._exit(1)


def replication_transport(config: BrokerConfig) -> FramedTransport:
    """The framed transport of the broker's replication listeners and of its followers'
    fetches over them. An answer is bounded by the largest fetch answer a leader builds (its
    response limit, overshot by at most one batch) or the largest frame the broker reads."""
    listener = config.replica_fetch_listener
    return FramedTransport(
        tls=config.listener_tls(listener) if listener is not None else None,
        response_decoders=FOLLOWER_DECODERS,
        max_answer_bytes=max(
            config["socket.request.max.bytes"],
            config["replica.fetch.response.max.bytes"] + config["message.max.bytes"] + 65_536,
        ),
        max_request_bytes=config["socket.request.max.bytes"],
        connect_timeout_s=config["replica.socket.timeout.ms"] / 1000,
    )


async def serve(config: BrokerConfig) -> None:
    session_timeout_ms = config["zookeeper.session.timeout.ms"]
    connect_timeout_ms = config["zookeeper.connection.timeout.ms"] or session_timeout_ms

    security = zk_security_for(config)

    def coordination() -> KazooCoordination:
        return KazooCoordination(
            config["zookeeper.connect"],
            session_timeout_ms,
            connect_timeout_ms=connect_timeout_ms,
            security=security,
        )

    # broker.id=-1: the id stored in meta.properties, or a new one from ZooKeeper.
    config = await resolve_broker_id(config, coordination)
    broker = Broker(
        config,
        # Over a TLS inter-broker listener, brokers call each other with that listener's
        # truststore and present its keystore as their client certificate (mutual TLS).
        # Fetch answers and produce requests are read with their records left in the
        # received bytes (no copy).
        transport=GrpcBrokerTransport(
            tls=config.listener_tls(config.inter_broker_listener),
            sasl=config.inter_broker_sasl(),
            response_decoders=FOLLOWER_DECODERS,
            request_decoders=PRODUCE_DECODERS,
        ),
        # Replication listeners (replica.fetch.listener.name) speak framed TCP; a follower
        # connects to them with that listener's TLS material, as to the inter-broker one.
        replication_transport=replication_transport(config),
        coordination_factory=coordination,
        clock=SystemClock(),
        controller_factory=controller_factory(lambda _broker_id: random.Random()),
        halt=_halt,
        # Checkpoint files and rolled segments are fsync'd off the event loop, as Kafka's
        # scheduler threads do it: a checkpoint write held every request up to 65 ms on a busy
        # disk, a roll's fsync 0.66 s (storage.checkpoint_writer, storage.roll_flush).
        checkpoint_writer=BackgroundCheckpointWriter(f"broker-{config.broker_id}-checkpoints"),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await broker.start()
    # What the start made lives as long as the process: out of the collector's full walks,
    # each of which stopped the loop for 30-91 ms (node.gc_tuning).
    frozen = freeze_startup_objects()
    logger.info(
        "broker %d: %d start-up objects left out of full collections", broker.broker_id, frozen
    )
    print(f"kafkasim broker {broker.broker_id} serving on {broker.address}", flush=True)
    if broker.metrics_address is not None:
        print(
            f"kafkasim broker {broker.broker_id} metrics on http://{broker.metrics_address}"
            "/metrics",
            flush=True,
        )
    await stop.wait()
    logger.info("broker %d: shutdown requested", broker.broker_id)
    await broker.shutdown()


def prepare_process() -> None:
    """What a broker process sets up before its event loop runs: the allocator for megabyte
    batches (reused heap, not fresh pages: node.malloc_tuning), and the CRC-32C library for
    large batches loaded now rather than on the loop at the first produce (storage.records.crc).
    """
    tune_malloc()
    load_folding()


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config, args.override)
    prepare_process()
    # The loop's selector is timed: its idle fraction is RequestHandlerAvgIdlePercent.
    with asyncio.Runner(loop_factory=idle_timing_loop) as runner:
        runner.run(serve(config))
    return 0
