"""``kafkasim console``'s arguments: refused before anything starts, in one line."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.request
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


def test_sigterm_stops_the_console_while_a_page_reads_its_event_stream() -> None:
    """A page's event stream never ends by itself; uvicorn's graceful shutdown waited for it,
    so a console with a browser tab open did not stop on SIGTERM (or a first Ctrl-C). The
    stream now ends when the server is asked to stop, and the console exits cleanly."""
    console = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kafkasim.cli",
            "console",
            "--bootstrap",
            "127.0.0.1:1",
            "--bind",
            "127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert console.stdout is not None
        line = console.stdout.readline()
        url = line.split("http://", 1)[1].split()[0].rstrip("/")
        stream = urllib.request.urlopen(f"http://{url}/api/events", timeout=30)
        first = stream.readline()  # the page is connected and reading
        assert first.startswith(b"data: ")
        console.send_signal(signal.SIGTERM)
        _, err = console.communicate(timeout=30)  # hung here before
        stream.close()
    finally:
        if console.poll() is None:
            console.kill()
            console.wait()
    # uvicorn re-raises the signal once it has shut down gracefully: the exit is SIGTERM's.
    assert console.returncode == -signal.SIGTERM, err
    assert "timeout graceful shutdown exceeded" not in err  # the stream ended by itself
