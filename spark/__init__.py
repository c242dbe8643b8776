"""kafkasim for PySpark: the ``kafkasim`` data source (Spark's Kafka source and sink).

``from kafkasim.spark import KafkasimDataSource; spark.dataSource.register(KafkasimDataSource)``.
Needs the ``spark`` extra (pyspark, pyarrow, pandas); see ``spark/README.md``.
"""

from kafkasim.spark.source import SHORT_NAME, KafkasimDataSource

__all__ = ["SHORT_NAME", "KafkasimDataSource"]
