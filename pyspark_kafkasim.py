"""Spark's static registration of the ``kafkasim`` data source.

On its first data source lookup, Spark (≥ 4.0) imports every top-level module on its Python
workers' path whose name starts with ``pyspark_`` and registers the ``DefaultSource`` it
defines, so ``format("kafkasim")``, ``USING kafkasim`` in SQL and ``spark-submit`` jobs work
without a ``spark.dataSource.register(KafkasimDataSource)`` call, as ``format("kafka")`` does.
Installed with the ``kafkasim`` package (a top-level module beside it); from a source checkout,
put the checkout on the workers' ``PYTHONPATH``.
"""

from kafkasim.spark.source import KafkasimDataSource as DefaultSource

__all__ = ["DefaultSource"]
