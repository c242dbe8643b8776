"""What a Spark user of ``format("kafka")`` types works here too: ``format("kafkasim")``
without a ``register()`` call (Spark's static registration of ``pyspark_*`` modules), SQL's
``USING kafkasim``, Spark's ``kafka.bootstrap.servers`` and ``kafka.*`` client options; a bad
option is one line; a write to an unreachable cluster fails within the configured
``kafka.max.block.ms``, not after Kafka's 60 s default."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from kafkasim.cluster.local import REPO_ROOT, LocalCluster
from tests.spark.conftest import ToSend, bootstrap, create_topic, produce

HIDE_TRACEBACK = "spark.sql.execution.pyspark.udf.hideTraceback.enabled"

_STATIC = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession

    servers, topic, local_dir = sys.argv[1:4]
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.local.dir", local_dir)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = (
        spark.read.format("kafkasim")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .load()
    )
    print("read", df.count())
    spark.sql(
        f"CREATE TEMPORARY VIEW v USING kafkasim "
        f"OPTIONS ('kafka.bootstrap.servers' '{servers}', 'subscribe' '{topic}')"
    )
    print("sql", spark.sql("SELECT count(*) AS n FROM v").collect()[0].n)
    spark.stop()
    """
)


def test_format_kafkasim_and_sql_work_without_registering(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    create_topic(cluster, "static-reg")
    produce(cluster, "static-reg", [ToSend(f"v{i}".encode()) for i in range(7)])
    script = tmp_path / "job.py"
    script.write_text(_STATIC)
    env = {
        **os.environ,
        # A source checkout on the workers' path (an installed kafkasim is on it already).
        "PYTHONPATH": str(REPO_ROOT),
        "PYSPARK_PYTHON": sys.executable,
    }
    out = subprocess.run(
        [sys.executable, str(script), bootstrap(cluster), "static-reg", str(tmp_path / "local")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert out.stdout.splitlines()[-2:] == ["read 7", "sql 7"], out.stdout


def test_a_bad_option_is_one_line(spark: SparkSession, cluster: LocalCluster) -> None:
    def failing_read() -> str:
        reader = (
            spark.read.format("kafkasim")
            .option("kafka.bootstrap.servers", bootstrap(cluster))
            .option("subscribe", "t")
            .option("startingOffset", "earliest")  # misspelt: startingOffsets
        )
        with pytest.raises(PySparkException) as caught:
            reader.load().collect()
        return str(caught.value)

    cut = failing_read().splitlines()
    # Spark's frame: the traceback stops at the data source's boundary (no 10-26 lines).
    assert len(cut) <= 5, cut
    assert cut[-2].startswith("kafkasim.spark.options.SparkOptionError: Unknown option"), cut
    assert "(did you mean 'startingOffsets'?)" in cut[-2], cut
    spark.conf.set(HIDE_TRACEBACK, "true")
    try:
        hidden = [line for line in failing_read().splitlines() if "SQLSTATE" not in line]
    finally:
        spark.conf.unset(HIDE_TRACEBACK)
    assert len(hidden) == 1 and "did you mean 'startingOffsets'?" in hidden[0], hidden


def test_a_write_to_an_unreachable_cluster_fails_within_max_block_ms(
    spark: SparkSession,
) -> None:
    frame = spark.createDataFrame([("a",)], "value STRING")
    started = time.monotonic()
    with pytest.raises(PySparkException) as caught:
        (
            frame.write.format("kafkasim")
            .mode("append")
            .option("kafka.bootstrap.servers", "127.0.0.1:1")
            .option("kafka.max.block.ms", "2000")
            .option("topic", "nowhere")
            .save()
        )
    elapsed = time.monotonic() - started
    assert "not present in metadata after 2000 ms" in str(caught.value)
    assert elapsed < 45, f"took {elapsed:.0f} s (kafka.max.block.ms=2000)"


def test_the_wheel_ships_the_static_registration_module(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), str(REPO_ROOT)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (wheel,) = tmp_path.glob("kafkasim-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "pyspark_kafkasim.py" in names
    assert "kafkasim/spark/source.py" in names
