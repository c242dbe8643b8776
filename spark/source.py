"""The ``kafkasim`` PySpark data source: Spark's Kafka source and sink, for kafkasim topics.

Register it once per SparkSession, then use it as ``format("kafka")`` is used::

    spark.dataSource.register(KafkasimDataSource)
    df = (spark.read.format("kafkasim")
          .option("kafkasim.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders")
          .load())

Which class runs where (Spark pickles them between its processes, so none holds a
connection; each callback opens its own, see :mod:`spark.cluster_io`):

==========================  ======================================  ========================
role                        class                                   module
==========================  ======================================  ========================
options, schema             :class:`KafkasimDataSource`             here, :mod:`spark.options`
batch read                  ``KafkasimBatchReader``                 :mod:`spark.reader`
streaming read              ``KafkasimStreamReader``                :mod:`spark.stream`
batch and streaming write   ``KafkasimWriter``, ``...StreamWriter``  :mod:`spark.writer`
==========================  ======================================  ========================

Options are checked when Spark asks for a reader or writer, on the driver, so that a bad
option fails the query before any task runs. The schema is fixed (Spark's Kafka schema); a
schema given with ``.schema(...)`` is refused, as Spark's Kafka source refuses one.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType
from typing_extensions import override

from kafkasim.spark.errors import user_facing
from kafkasim.spark.options import SparkOptionError, parse_sink_options, parse_source_options
from kafkasim.spark.reader import KafkasimBatchReader
from kafkasim.spark.rows import kafka_schema
from kafkasim.spark.stream import KafkasimStreamReader
from kafkasim.spark.writer import KafkasimStreamWriter, KafkasimWriter, check_columns

SHORT_NAME = "kafkasim"


class KafkasimDataSource(DataSource):
    """``format("kafkasim")``: see the module doc and ``spark/README.md``."""

    @override
    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def _include_headers(self) -> bool:
        raw = {k.lower(): v for k, v in self.options.items()}.get("includeheaders", "false")
        return str(raw).strip().lower() == "true"

    @override
    def schema(self) -> StructType:
        return kafka_schema(self._include_headers())

    def _check_schema(self, schema: StructType) -> None:
        expected = kafka_schema(self._include_headers())
        if schema != expected:
            raise SparkOptionError(
                "The kafkasim source has a fixed schema and cannot be set with a custom one: "
                f"expected {expected.simpleString()}, got {schema.simpleString()}"
            )

    @override
    @user_facing
    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_source_options(self.options, streaming=False)
        self._check_schema(schema)
        return KafkasimBatchReader(options)

    @override
    @user_facing
    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = parse_source_options(self.options, streaming=True)
        self._check_schema(schema)
        return KafkasimStreamReader(options)

    @override
    @user_facing
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        options = parse_sink_options(self.options)
        if options.exactly_once:
            raise SparkOptionError(
                "Option 'kafkasim.sink.exactlyOnce' applies to streaming writes only (a batch "
                "write has no micro-batch id to record)"
            )
        check_columns(schema, options)
        return KafkasimWriter(options)

    @override
    @user_facing
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options = parse_sink_options(self.options)
        check_columns(schema, options)
        return KafkasimStreamWriter(options)
