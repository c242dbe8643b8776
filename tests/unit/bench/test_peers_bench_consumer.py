"""peers_bench's reading of the consumer perf tools' output: Kafka 0.9's ConsumerPerformance
(six fields) and kafkasim's consumer-perf-test (ten, and its timeout warning before the
summary); a run that read too few records, or printed no summary, is an error."""

from __future__ import annotations

import subprocess

import pytest

from bench.peers_bench import consumed_rate, consumer_summary

KAFKA_09 = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec\n"
    "2026-11-26 12:00:00:000, 2026-11-26 12:00:02:500, 95.3674, 38.1470, 1000000, 400000.0000\n"
)
KAFKASIM = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec\n"
    "WARNING: Exiting before consuming the expected number of messages: timeout (10000 ms) "
    "exceeded. You can use the --timeout option to increase the timeout.\n"
    "2026-11-26 12:00:00:000, 2026-11-26 12:00:08:000, 9.5367, 1.1921, 99000, 12375.0000, "
    "0, 8000, 1.1921, 12375.0000\n"
)


def test_kafka_09_summary() -> None:
    assert consumer_summary(KAFKA_09) == (1_000_000, 400_000.0)


def test_kafkasim_summary_after_its_warning() -> None:
    assert consumer_summary(KAFKASIM) == (99_000, 12_375.0)


def test_log_lines_before_the_header_are_ignored() -> None:
    noisy = "[2026-11-26 12:00:00,000] WARN a, b, c, d, 5, 6 (x)\n" + KAFKA_09
    assert consumer_summary(noisy) == (1_000_000, 400_000.0)


@pytest.mark.parametrize(
    "stdout",
    ["", KAFKA_09.splitlines()[0] + "\n", "2026-11-26 12:00:00:000, x, 1.0, 1.0, 10, 5.0\n"],
)
def test_no_summary(stdout: str) -> None:
    assert consumer_summary(stdout) is None


def _done(stdout: str, returncode: int = 0) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(["tool"], returncode, stdout, "")


def test_rate_when_every_record_was_read() -> None:
    assert consumed_rate("ConsumerPerformance", _done(KAFKA_09), 1_000_000) == 400_000.0


def test_too_few_records_read_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="99000 of 100000 records read"):
        consumed_rate("consumer-perf-test", _done(KAFKASIM), 100_000)


def test_a_failed_tool_is_an_error() -> None:
    with pytest.raises(RuntimeError, match=r"ConsumerPerformance failed \(1, no summary\)"):
        consumed_rate("ConsumerPerformance", _done("Exception in thread main", 1), 10)
