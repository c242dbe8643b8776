"""The Spark engine of a sweep: each chunk of seeds is one Spark task.

1. ``check_master`` refuses, before a JVM starts, a master URL Spark would not take (Spark's
   own refusal is a JVM stack trace on stderr): ``local``, ``local[N]``, ``local[*]``,
   ``local[N,F]``, ``local-cluster[N,C,M]``, ``spark://HOST:PORT[,HOST:PORT...]``, ``yarn``,
   ``k8s://URL``.
2. The session's Python workers run this interpreter (``PYSPARK_PYTHON``, read when the JVM
   starts) with this checkout on their path (``spark.executorEnv.PYTHONPATH``): local masters
   and clusters that share the checkout's path find ``kafkasim`` there; elsewhere install
   ``kafkasim`` on the workers, as for the data source (spark/README.md).
3. Chunks run as separate Spark jobs of one task each, at most the cluster's default
   parallelism at a time, submitted from driver threads; as each job finishes its rows come
   back to the driver's thread (``on_done``), which appends them to the resume state. A task's
   rows are the ``SeedResult``s of its chunk: small, whatever the runs' histories weigh.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from kafkasim.cluster.local import REPO_ROOT
from kafkasim.faults.scenario import Scenario
from kafkasim.faults.sweep import (
    Chunk,
    ChunkResult,
    OnDone,
    SweepInputError,
    SweepPlan,
    gather,
    quiet_logs,
    run_chunk,
)

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["DEFAULT_MASTER", "SparkEngine", "SparkUnavailableError", "check_master"]

DEFAULT_MASTER = "local[*]"
_MASTER = re.compile(
    r"local"
    r"|local\[(?:[1-9][0-9]*|\*)(?:\s*,\s*[0-9]+)?\]"
    r"|local-cluster\[\s*[1-9][0-9]*\s*,\s*[1-9][0-9]*\s*,\s*[1-9][0-9]*\s*\]"
    r"|spark://[^\s,:/]+:[0-9]+(?:,[^\s,:/]+:[0-9]+)*"
    r"|yarn"
    r"|k8s://\S+"
)


class SparkUnavailableError(SweepInputError):
    """pyspark or Java is missing, or Spark did not start."""


def check_master(master: str) -> str:
    if not _MASTER.fullmatch(master):
        raise SweepInputError(
            f"--spark {master!r}: not a Spark master URL (local, local[N], local[*], "
            "local-cluster[N,C,M], spark://HOST:PORT, yarn, k8s://URL)"
        )
    return master


def _rows(base: Scenario, chunk: Chunk) -> Iterator[ChunkResult]:
    """The task: a chunk's seeds, run on the executor."""
    quiet_logs()
    yield run_chunk(base, chunk)


class SparkEngine:
    """A SparkSession on ``master`` for the sweep; ``close`` stops it."""

    def __init__(self, master: str, app_name: str = "kafkasim-sweep") -> None:
        check_master(master)
        try:
            from pyspark.sql import SparkSession  # noqa: PLC0415 - only --spark needs it
        except ImportError:
            raise SparkUnavailableError(
                "--spark needs pyspark: install the spark extra (pip install 'kafkasim[spark]')"
            ) from None
        # The JVM starts its Python workers with PYSPARK_PYTHON, read when the session starts.
        self._python_before = os.environ.get("PYSPARK_PYTHON")
        os.environ["PYSPARK_PYTHON"] = sys.executable
        path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)
        try:
            self.session = (
                SparkSession.builder.master(master)
                .appName(app_name)
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.executorEnv.PYTHONPATH", path)
                .config("spark.python.worker.reuse", "true")
                .getOrCreate()
            )
        except Exception as e:  # pyspark raises its own hierarchy, and RuntimeError for Java
            detail = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            message = f"--spark {master}: Spark did not start: {detail}"
            raise SparkUnavailableError(message) from None
        self.master = master
        self.context: SparkContext = self.session.sparkContext
        self.context.setLogLevel("ERROR")

    @property
    def slots(self) -> int:
        return max(1, int(self.context.defaultParallelism))

    def __call__(self, plan: SweepPlan, chunks: Sequence[Chunk], on_done: OnDone) -> None:
        context = self.context

        def one(chunk: Chunk) -> ChunkResult:
            base = plan.scenarios[chunk.scenario]
            rdd = context.parallelize([chunk], 1).mapPartitions(
                lambda part: (r for c in part for r in _rows(base, c))
            )
            [finished] = rdd.collect()
            return finished

        with concurrent.futures.ThreadPoolExecutor(max_workers=self.slots) as threads:
            futures = [threads.submit(one, chunk) for chunk in chunks]
            gather(futures, on_done, on_abort=context.cancelAllJobs)

    def close(self) -> None:
        self.session.stop()
        if self._python_before is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = self._python_before
