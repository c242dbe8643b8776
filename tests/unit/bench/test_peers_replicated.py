"""peers_replicated's pure helpers: the rotation of the setups' order from round to round,
the count check of a run (end offsets against records produced) and the ratios table."""

from __future__ import annotations

import pytest

from bench.peers_replicated import SETUPS, check_count, main, ratio_lines, rotated


def test_each_setup_leads_one_round_in_turn() -> None:
    names = ["a", "b", "c", "d"]
    orders = [rotated(names, round_) for round_ in range(5)]
    assert orders == [
        ["a", "b", "c", "d"],
        ["b", "c", "d", "a"],
        ["c", "d", "a", "b"],
        ["d", "a", "b", "c"],
        ["a", "b", "c", "d"],
    ]


def test_matching_count_passes() -> None:
    check_count("kafkasim RF=3 acks=all", "replicated-1", 300_001, 300_001)


def test_missing_records_are_an_error() -> None:
    with pytest.raises(RuntimeError, match=r"replicated-7 holds 299990 records .* 300001 were"):
        check_count("Kafka RF=3 acks=all", "replicated-7", 299_990, 300_001)


def test_ratios_of_both_systems_and_between_them_at_rf3() -> None:
    names = [setup.name for setup in SETUPS]
    assert names == [
        "kafkasim 1 broker acks=1",
        "kafkasim RF=3 acks=all",
        "Kafka 1 broker acks=1",
        "Kafka RF=3 acks=all",
    ]
    medians = {
        (names[0], 100): 100_000.0,
        (names[1], 100): 60_000.0,
        (names[2], 100): 500_000.0,
        (names[3], 100): 250_000.0,
    }
    header, row = ratio_lines(medians, [100])
    assert header.split()[-6:] == ["kafkasim", "RF3/1", "Kafka", "RF3/1", "RF3", "ks/Kafka"]
    # kafkasim 60k/100k, Kafka 250k/500k, kafkasim/Kafka at RF=3 60k/250k.
    assert row.split() == ["100B", "100000", "60000", "500000", "250000", "0.60", "0.50", "0.24"]


@pytest.mark.parametrize("argv", [["--partitions", "0"], ["--sizes", "512"]])
def test_bad_options_are_refused_before_anything_starts(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--replicated", *argv])
    assert exited.value.code == 2
    assert argv[0] in capsys.readouterr().err
