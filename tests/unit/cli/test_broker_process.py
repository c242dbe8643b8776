"""``kafkasim broker``'s process set-up before its event loop runs (``cli.broker.prepare_process``).

The CRC-32C library for large batches (``storage.records.crc``) is loaded lazily, so that tools
that only check small batches never pay ~50 ms for it; a broker loads it at its start, not on its
event loop at the first large produce or fetch. Checked in a process of its own: this one may
have loaded the library already."""

from __future__ import annotations

from tests.cli_run import python

_PROBE = (
    "import sys\n"
    "from kafkasim.cli import broker\n"
    "before = 'awscrt.checksums' in sys.modules\n"
    "broker.prepare_process()\n"
    "print(before, 'awscrt.checksums' in sys.modules)\n"
)


def test_a_broker_loads_the_large_batch_checksum_before_its_first_request() -> None:
    done = python("-c", _PROBE)
    assert done.returncode == 0, done.stderr
    # Importing the broker's module leaves it unloaded (the tools' lazy path stays lazy), and
    # preparing the process loads it.
    assert done.stdout.split() == ["False", "True"]
