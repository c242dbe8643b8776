"""console-consumer's ``--isolation-level`` (Kafka's flag) reaches the consumer's config as
``isolation.level``; without it the consumer's default (read_uncommitted) stands."""

from __future__ import annotations

import argparse

import pytest

from kafkasim.cli import console_consumer
from kafkasim.cli.main import build_parser


def _config(monkeypatch: pytest.MonkeyPatch, *flags: str) -> dict[str, object]:
    seen: dict[str, object] = {}

    async def fake_consume(
        _args: argparse.Namespace, config: dict[str, object], *_rest: object, **_kw: object
    ) -> int:
        seen.update(config)
        return 0

    monkeypatch.setattr(console_consumer, "consume", fake_consume)
    args = build_parser().parse_args(
        ["console-consumer", "--bootstrap-server", "127.0.0.1:9092", "--topic", "t", *flags]
    )
    assert console_consumer.cmd_console_consumer(args) == 0
    return seen


def test_isolation_level_goes_to_the_consumer(monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config(monkeypatch, "--isolation-level", "read_committed")
    assert config["isolation.level"] == "read_committed"
    assert "isolation.level" not in _config(monkeypatch)


def test_a_bad_isolation_level_is_refused() -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(
            [
                "console-consumer",
                "--bootstrap-server",
                "b:1",
                "--topic",
                "t",
                "--isolation-level",
                "x",
            ]
        )
