"""``kafkasim console``'s arguments: refused before anything starts, in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkasim.cli.console import parse_bind
from kafkasim.cli.main import main


@pytest.mark.parametrize("text", ["9021", "host:", ":80", "h:99999", "h:x"])
def test_a_bad_bind_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--bind expects HOST:PORT"):
        parse_bind(text)


def test_a_good_bind() -> None:
    assert parse_bind("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_bind("::1:9021") == ("::1", 9021)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bootstrap", "a:1", "--bind", "nope"], "--bind expects HOST:PORT"),
        (["--dir", "{tmp}", "--zookeeper", "z:1"], "--zookeeper goes with --bootstrap"),
        (["--dir", "{tmp}"], "no cluster in"),
        (["--bootstrap", " , "], "--bootstrap expects HOST:PORT"),
        (["--replay", "{tmp}/missing.jsonl"], "missing.jsonl"),
    ],
)
def test_console_refuses_bad_arguments(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["console", *(a.replace("{tmp}", str(tmp_path)) for a in args)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kafkasim console: error:")
    assert message in err
