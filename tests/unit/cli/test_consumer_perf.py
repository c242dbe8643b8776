"""consumer-perf-test's output and loop, without a cluster: Kafka's header and result lines
character for character (Java's date format and ``%.4f``), the progress lines, the timeout
warning, when the loop stops and what it counts, and how the consumer config is put
together. The tool against real brokers: tests/integration/test_cli_consumer_perf.py."""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from kafkasim.cli.consumer_perf import (
    DETAILED_HEADER,
    SUMMARY_HEADER,
    PerfSettings,
    Progress,
    consume_loop,
    consumer_config,
    format_figure,
    format_time,
    progress_line,
    settings_from,
    summary_line,
    timeout_warning,
)
from kafkasim.cli.main import build_parser
from kafkasim.common.clock import ManualClock

# 2023-11-14 22:13:20.000 UTC
T0_MS = 1_700_000_000_000


@pytest.fixture
def utc() -> Iterator[None]:
    """Dates print in the local time zone, as Java's SimpleDateFormat: pin it to UTC."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()


def test_headers_are_kafkas_words_in_kafkas_order() -> None:
    assert SUMMARY_HEADER == (
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
    )
    assert DETAILED_HEADER == (
        "time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
    )


@pytest.mark.parametrize(
    ("epoch_ms", "text"),
    [
        (T0_MS, "2023-11-14 22:13:20:000"),
        (T0_MS + 7, "2023-11-14 22:13:20:007"),  # milliseconds keep three digits
        (T0_MS + 999, "2023-11-14 22:13:20:999"),  # never rounded up into the next second
        (T0_MS + 3_600_000 * 2 + 61_042, "2023-11-15 00:14:21:042"),  # past midnight
    ],
)
def test_time_is_javas_yyyy_mm_dd_hh_mm_ss_sss(utc: None, epoch_ms: int, text: str) -> None:
    assert format_time(epoch_ms) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0.0000"),
        (1 / 3, "0.3333"),
        (2 / 3, "0.6667"),
        (0.03125, "0.0313"),  # an exact binary tie: Java rounds half up, Python's % to even
        (0.00005, "0.0001"),  # half up on the shortest decimal form, as Java
        (221150.11037527593, "221150.1104"),
        (123456789.0, "123456789.0000"),
        (1e20, "100000000000000000000.0000"),  # never an exponent
        (math.inf, "Infinity"),  # a rate over no elapsed time, as Java prints it
        (math.nan, "NaN"),
    ],
)
def test_figures_are_javas_four_decimals(value: float, text: str) -> None:
    assert format_figure(value) == text


def test_the_summary_line_has_totals_rates_and_fetch_rates_without_the_rebalance(
    utc: None,
) -> None:
    line = summary_line(
        start_ms=T0_MS,
        end_ms=T0_MS + 2_500,
        bytes_read=10_000_000,
        messages_read=100_000,
        rebalance_ms=500,
    )
    assert line == (
        "2023-11-14 22:13:20:000, 2023-11-14 22:13:22:500, 9.5367, 3.8147, 100000, "
        "40000.0000, 500, 2000, 4.7684, 50000.0000"
    )


def test_a_summary_over_no_elapsed_time_prints_javas_nan_and_infinity(utc: None) -> None:
    """--messages 0 can end in the same millisecond it started: Java divides by 0.0."""
    empty = summary_line(
        start_ms=T0_MS, end_ms=T0_MS, bytes_read=0, messages_read=0, rebalance_ms=0
    )
    assert empty.split(", ")[2:] == ["0.0000", "NaN", "0", "NaN", "0", "0", "NaN", "NaN"]
    some = summary_line(start_ms=T0_MS, end_ms=T0_MS, bytes_read=1, messages_read=1, rebalance_ms=0)
    assert some.split(", ")[3] == "Infinity"


def test_a_progress_line_has_totals_so_far_and_rates_over_the_interval(utc: None) -> None:
    progress = Progress(
        bytes_read=3 * 1024 * 1024,
        last_bytes_read=1024 * 1024,
        messages_read=30_000,
        last_messages_read=10_000,
        start_ms=T0_MS,
        end_ms=T0_MS + 4_000,
    )
    assert progress_line(progress) == (
        "2023-11-14 22:13:24:000, 0, 3.0000, 0.5000, 30000, 5000.0000, 0, 4000, 0.5000, 5000.0000"
    )


def test_a_progress_interval_spent_rebalancing_has_zero_fetch_rates(utc: None) -> None:
    progress = Progress(1024, 0, 10, 0, T0_MS, T0_MS + 100, rebalance_ms=100)
    assert progress_line(progress).split(", ")[-3:] == ["0", "0.0000", "0.0000"]


def test_the_timeout_warning_is_kafkas_sentence() -> None:
    assert timeout_warning(10_000) == (
        "WARNING: Exiting before consuming the expected number of messages: timeout "
        "(10000 ms) exceeded. You can use the --timeout option to increase the timeout."
    )


# -- the loop -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rec:
    """The two fields the measurement reads of a ConsumerRecord."""

    key: bytes | None
    value: bytes | None


class ScriptedPoll:
    """Each poll advances the clock by ``step_ms`` and returns the next scripted batch
    (nothing once the script is done)."""

    def __init__(
        self, clock: ManualClock, batches: Sequence[Sequence[Rec]], step_ms: int = 100
    ) -> None:
        self.clock = clock
        self.batches = list(batches)
        self.step_ms = step_ms
        self.polls = 0

    async def __call__(self, timeout_ms: int) -> Sequence[Part]:
        assert timeout_ms == 100  # Kafka's tool polls in 100 ms steps
        self.polls += 1
        self.clock.advance(self.step_ms)
        if not self.batches:
            return []
        records = self.batches.pop(0)  # as poll_batch returns them: one partition's columns
        return [Part([r.key for r in records], [r.value for r in records])]


@dataclass(frozen=True)
class Part:
    """The two columns the measurement reads of a poll_batch part."""

    keys: list[bytes | None]
    values: list[bytes | None]


def settings(messages: int, *, timeout_ms: int = 10_000, interval_ms: int = 5_000) -> PerfSettings:
    return PerfSettings(
        topic="t",
        messages=messages,
        timeout_ms=timeout_ms,
        reporting_interval_ms=interval_ms,
        show_detailed_stats=True,
        hide_header=False,
        group=None,
    )


def test_every_record_of_the_last_poll_counts_and_data_is_key_plus_value() -> None:
    """As in Kafka, --messages is checked between polls: 3 wanted, 4 returned, 4 counted."""
    clock = ManualClock()
    poll = ScriptedPoll(clock, [[Rec(b"k", b"vv"), Rec(None, b"vvv")], [Rec(b"kk", None)] * 2])
    totals = asyncio.run(consume_loop(poll, clock, settings(3), lambda _: None))
    assert (totals.messages_read, totals.bytes_read) == (4, 3 + 3 + 2 + 2)
    assert poll.polls == 2


def test_the_loop_stops_once_no_record_came_for_longer_than_the_timeout() -> None:
    """Empty polls of 100 ms each: the loop polls until more than 1000 ms have passed since
    the last record, and returns what it has."""
    clock = ManualClock()
    poll = ScriptedPoll(clock, [[Rec(None, b"v")]])
    totals = asyncio.run(consume_loop(poll, clock, settings(5, timeout_ms=1_000), lambda _: None))
    assert totals.messages_read == 1
    assert poll.polls == 1 + 11  # the record's poll, then 1100 ms of empty ones


def test_progress_is_reported_once_per_interval_with_the_interval_totals() -> None:
    clock = ManualClock()
    batches = [[Rec(None, b"x" * 10)] for _ in range(10)]
    poll = ScriptedPoll(clock, batches, step_ms=100)
    reports: list[Progress] = []
    asyncio.run(consume_loop(poll, clock, settings(10, interval_ms=300), reports.append))
    assert [(p.messages_read, p.last_messages_read) for p in reports] == [(3, 0), (6, 3), (9, 6)]
    assert [p.end_ms - p.start_ms for p in reports] == [300, 300, 300]
    assert reports[-1].bytes_read == 90


# -- the command line -------------------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["consumer-perf-test", *argv])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--topic", "t"], 'Missing required argument "[messages]"'),
        (["--messages", "5"], 'Missing required argument "[topic]"'),
        (["--topic", "t", "--messages", "ten"], "--messages expects a whole number, got 'ten'"),
        (["--topic", "t", "--messages", "-1"], "--messages must be at least 0"),
        (["--topic", "t", "--messages", "1", "--timeout", "1.5"], "--timeout expects a whole"),
        (["--topic", "t", "--messages", "1", "--reporting-interval", "0"], "must be at least 1"),
    ],
)
def test_bad_numbers_and_missing_flags_raise_one_clear_message(
    argv: list[str], message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        settings_from(parse(*argv))
    assert message in str(raised.value)


def test_defaults_are_kafkas() -> None:
    got = settings_from(parse("--topic", "t", "--messages", "7"))
    assert (got.timeout_ms, got.reporting_interval_ms) == (10_000, 5_000)
    assert not (got.show_detailed_stats or got.hide_header)


def test_consumer_config_file_then_props_then_the_tools_own_settings(tmp_path: Path) -> None:
    path = tmp_path / "consumer.properties"
    path.write_text(
        "# as Kafka's --consumer.config\n"
        "bootstrap.servers=elsewhere:1\n"
        "auto.offset.reset=latest\n"
        "client.id=from-file\n"
        "fetch.max.wait.ms=100\n"
    )
    args = parse(
        "--topic", "t", "--messages", "1", "--consumer.config", str(path),
        "--consumer-props", "client.id=from-props", "max.partition.fetch.bytes=4096",
    )  # fmt: skip
    config = consumer_config(args, ["b1:9092", "b2:9092"])
    assert config == {
        "bootstrap.servers": "b1:9092,b2:9092",  # the tool's flag wins, as in Kafka
        "auto.offset.reset": "earliest",  # the benchmark reads from the beginning
        "client.id": "from-props",
        "fetch.max.wait.ms": "100",
        "max.partition.fetch.bytes": "4096",  # no --fetch-size: the props' value stays
    }
    sized = consumer_config(parse("--topic", "t", "--fetch-size", "2048"), ["b:1"])
    assert sized["max.partition.fetch.bytes"] == 2048
    assert sized["client.id"] == "perf-consumer-client"  # Kafka's default for the tool
    assert consumer_config(parse("--topic", "t"), ["b:1"])["max.partition.fetch.bytes"] == 1 << 20


def test_a_report_due_in_a_poll_comes_after_its_first_record_as_kafkas() -> None:
    """Kafka checks the interval per record against the poll's time: a poll of 3 records
    that crosses the interval reports after its first; the other two count afterwards."""
    clock = ManualClock()
    batches = [[Rec(b"k", b"v")] * 3 for _ in range(3)]
    poll = ScriptedPoll(clock, batches, step_ms=200)
    reports: list[Progress] = []
    totals = asyncio.run(consume_loop(poll, clock, settings(9, interval_ms=300), reports.append))
    assert [(p.messages_read, p.last_messages_read) for p in reports] == [(4, 0)]
    assert reports[0].bytes_read == 8
    assert (totals.messages_read, totals.bytes_read) == (9, 18)
