"""The client tools against a bootstrap server nobody listens on, run as a user runs them:
Kafka's connection warning while they wait, a one-line error in Kafka's words, and an end
within the timeout given (bounds are generous upper ones, for a loaded machine)."""

from __future__ import annotations

import time

from tests.cli_run import kafkasim

NOBODY = "127.0.0.1:1"  # a closed port: the connection is refused
WARNING = f"Connection to node -1 ({NOBODY}) could not be established. Broker may not be available."
SLACK_S = 5.0  # interpreter start-up and a loaded machine


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
