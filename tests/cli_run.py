"""The `kafkasim` command as the tests run it: a subprocess of this interpreter
(``python -m cli``) with the repository on PYTHONPATH, output captured as text, a non-zero exit
returned rather than raised; a `kafkasim cluster up` cluster for a test module, and a
``LocalCluster`` started in this process for fixtures that drive its brokers directly."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from kafkasim.cluster.local import LocalCluster
from kafkasim.controller.zk_process import zookeeper_available

ROOT = Path(__file__).resolve().parents[1]

# What the test clusters change from Kafka's defaults, as Kafka's own test harness does
# (TestUtils.createBrokerConfig shortens the same backoff): the last brokers of a cluster that
# stops as a whole cannot hand their partitions to anyone and retry their controlled shutdown,
# which at the default 5 s backoff made every cluster's stop take ~12 s.
TEST_BROKER_PROPS: Mapping[str, object] = {"controlled.shutdown.retry.backoff.ms": 200}
TEST_OVERRIDES: tuple[str, ...] = tuple(
    arg for key, value in TEST_BROKER_PROPS.items() for arg in ("--override", f"{key}={value}")
)
"""``TEST_BROKER_PROPS`` as ``kafkasim cluster up`` flags."""


def python(
    *args: str,
    stdin: str = "",
    env: Mapping[str, str] | None = None,
    cwd: Path = ROOT,
    timeout: float = 300.0,
) -> subprocess.CompletedProcess[str]:
    """This interpreter run with ``args`` in a process of its own, the repository on its path
    (``env`` adds variables to this process's environment), ``stdin`` as its input."""
    return subprocess.run(
        [sys.executable, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        cwd=cwd,
        timeout=timeout,
        check=False,
    )


def kafkasim(
    *args: str,
    stdin: str = "",
    env: Mapping[str, str] | None = None,
    timeout: float = 180.0,
) -> subprocess.CompletedProcess[str]:
    """Run ``kafkasim ARGS`` with ``stdin`` as its input (``env`` adds variables to this
    process's environment)."""
    return python("-m", "kafkasim.cli", *args, stdin=stdin, env=env, timeout=timeout)


@contextlib.contextmanager
def cluster_up(root: Path, *up_args: str, timeout: float = 180.0) -> Iterator[Path]:
    """`kafkasim cluster up --dir ROOT UP_ARGS`, and `cluster down` after, whatever happens;
    skips the test when a real ZooKeeper cannot run here."""
    reason = zookeeper_available()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")
    test_overrides = [
        arg for key, value in TEST_BROKER_PROPS.items() for arg in ("--override", f"{key}={value}")
    ]
    up = kafkasim("cluster", "up", *test_overrides, *up_args, "--dir", str(root), timeout=timeout)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        yield root
    finally:
        kafkasim("cluster", "down", "--dir", str(root), timeout=timeout)


@contextlib.contextmanager
def local_cluster(
    root: Path,
    brokers: int = 3,
    broker_props: dict[str, object] | None = None,
    *,
    tls: bool = False,
    framed_replication: bool | None = None,
) -> Iterator[LocalCluster]:
    """A started ``LocalCluster`` of ``brokers`` brokers under ``root`` (``broker_props`` added
    to every broker's config; ``tls``: mutual TLS on every listener; ``framed_replication``:
    followers fetch over replication listeners), stopped after whatever happens; skips the
    test when a real ZooKeeper cannot run here."""
    reason = zookeeper_available()
    if reason is not None:
        pytest.skip(f"real ZooKeeper unavailable: {reason}")
    props = {**TEST_BROKER_PROPS, **(broker_props or {})}
    cluster = LocalCluster(
        root, brokers=brokers, broker_props=props, tls=tls, framed_replication=framed_replication
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
