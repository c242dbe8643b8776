"""The client tools against a bootstrap server nobody listens on, run as a user runs them:
Kafka's connection warning while they wait, a one-line error in Kafka's words naming the
timeout given, and an end long before the default timeouts (60 s) would have ended them."""

from __future__ import annotations

import time

from tests.cli_run import kafkasim

NOBODY = "127.0.0.1:1"  # a closed port: the connection is refused
WARNING = f"Connection to node -1 ({NOBODY}) could not be established. Broker may not be available."
# Interpreter start-up and a loaded machine: the unit suites also run niced beside the rest
# (./dev test), where start-up alone took over 5 s. A tool that ignored the timeout given
# would wait out the 60 s default (max.block.ms, default.api.timeout.ms) and fail the bound.
SLACK_S = 30.0


def _run(timeout_ms: int, *args: str, stdin: str = "") -> tuple[list[str], float, int]:
    started = time.monotonic()
    out = kafkasim(*args, stdin=stdin, timeout=60)
    elapsed = time.monotonic() - started
    assert elapsed < timeout_ms / 1000 + SLACK_S, elapsed
    lines = out.stderr.splitlines()
    warnings = [line for line in lines if WARNING in line]
    assert warnings, out.stderr
    # Rate-limited: about one a second, not one per retry.
    assert len(warnings) <= timeout_ms / 1000 + 2, out.stderr
    assert "UNAVAILABLE" not in out.stderr and "Traceback" not in out.stderr
    return [line for line in lines if WARNING not in line], elapsed, out.returncode


def test_console_consumer_honours_timeout_ms() -> None:
    rest, _, code = _run(
        3000,
        "console-consumer", "--bootstrap-server", NOBODY, "--topic", "events",
        "--timeout-ms", "3000",
    )  # fmt: skip
    assert code == 1
    assert rest == [
        "kafkasim console-consumer: error: REQUEST_TIMED_OUT: "
        "Topic events not present in metadata after 3000 ms."
    ]


def test_console_consumer_without_timeout_ms_stops_at_default_api_timeout_ms() -> None:
    rest, _, code = _run(
        2000,
        "console-consumer", "--bootstrap-server", NOBODY, "--topic", "events",
        "--consumer-property", "default.api.timeout.ms=2000",
    )  # fmt: skip
    assert code == 1
    assert rest == [
        "kafkasim console-consumer: error: REQUEST_TIMED_OUT: "
        "Topic events not present in metadata after 2000 ms."
    ]


def test_console_producer_honours_max_block_ms() -> None:
    rest, _, code = _run(
        2000,
        "console-producer", "--bootstrap-server", NOBODY, "--topic", "events",
        "--max-block-ms", "2000",
        stdin="one\n",
    )  # fmt: skip
    assert code == 1
    assert rest == [
        "Error when sending message to topic events with error: REQUEST_TIMED_OUT: "
        "Topic events not present in metadata after 2000 ms."
    ]


def test_producer_perf_test_honours_max_block_ms() -> None:
    rest, _, code = _run(
        2000,
        "producer-perf-test", "--topic", "events", "--num-records", "50",
        "--record-size", "10", "--throughput", "-1",
        "--producer-props", f"bootstrap.servers={NOBODY}", "max.block.ms=2000",
    )  # fmt: skip
    assert code == 1
    assert rest == [
        "Error when sending message to topic events: REQUEST_TIMED_OUT: "
        "Topic events not present in metadata after 2000 ms."
    ]
