"""The ``kafkasim`` command's process entry (the console script and ``python -m kafkasim.cli``).

Before the command line's modules load, it keeps hypothesis out of the process. kio, the
Kafka protocol's schema library, registers a hypothesis strategy for each of its types
whenever hypothesis can be imported; only property tests use them. hypothesis is there in the
development environment (``./dev`` installs the test extras), where every ``kafkasim`` process
— each broker of a local cluster, each tool — paid ~0.3 s of CPU for it at start, and, in a
directory it had not run in before, ~1.5 s more and a ``.hypothesis`` directory left behind
(hypothesis' cache of Unicode categories). A ``None`` in ``sys.modules`` makes
``import hypothesis`` raise ImportError, the case kio handles when hypothesis is not installed.
Code that imports the command line's modules itself (the tests) is left as it is.
"""

from __future__ import annotations

import sys

TEST_ONLY_MODULES = ("hypothesis",)


def keep_test_only_modules_out() -> None:
    """Make the test-only modules unimportable in this process, unless one is loaded already."""
    for name in TEST_ONLY_MODULES:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]  # None blocks the import


def main() -> int:
    keep_test_only_modules_out()
    from kafkasim.cli.main import main as run_command  # noqa: PLC0415 - after the block

    return run_command()
