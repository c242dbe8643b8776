"""Kafka record formats: RecordBatch v2 (magic 2) and the legacy message formats v0 and v1.

Rooms:

* :mod:`~storage.records.varint` — zig-zag varints (Protobuf encoding) used inside v2 records.
* :mod:`~storage.records.compression` — the codecs with Kafka's framing (gzip, xerial snappy,
  lz4 frame, zstd).
* :mod:`~storage.records.batch` — RecordBatch v2: header parsing, CRC-32C validation, in-place
  rewrites for the leader (offset, leader epoch, LogAppendTime), the builder and the decoder,
  control (transaction marker) batches.
* :mod:`~storage.records.legacy` — message formats v0 and v1 with their CRC32 and wrapper
  messages.
* :mod:`~storage.records.entry` — one entry of any format: its header, and
  :func:`decode_entries`, the one reader of records out of a buffer mixing the formats.
* :mod:`~storage.records.validation` — record-level validation of a v2 batch (every record
  walked once), as Kafka's ``LogValidator`` does on the leader.

The magic byte is at byte 16 in every format (:func:`peek_magic`), so a reader of a mixed log
picks the parser per entry. See ``docs/record-formats.md`` for the formats side by side.
"""

from kafkasim.storage.records.batch import (
    ATTRIBUTES_OFFSET,
    BASE_OFFSET_OFFSET,
    BASE_SEQUENCE_OFFSET,
    CRC_OFFSET,
    FIRST_TIMESTAMP_OFFSET,
    LAST_OFFSET_DELTA_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAGIC_V2,
    MAX_TIMESTAMP_OFFSET,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    PARTITION_LEADER_EPOCH_OFFSET,
    PRODUCER_EPOCH_OFFSET,
    PRODUCER_ID_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_OFFSET,
    BatchHeader,
    ControlRecordType,
    EndTransactionMarker,
    Header,
    Record,
    RecordBatchBuilder,
    TimestampType,
    compute_crc,
    control_record_key,
    decode_batch,
    encode_batch,
    encode_control_batch,
    encode_empty_batch,
    increment_sequence,
    iter_batches,
    parse_control_key,
    parse_end_transaction_marker,
    peek_magic,
    record_size_upper_bound,
    set_base_offset,
    set_last_offset,
    set_log_append_time,
    set_max_timestamp,
    set_partition_leader_epoch,
    validate_batch,
)
from kafkasim.storage.records.compression import CompressionType, compress, decompress
from kafkasim.storage.records.entry import LogEntryHeader, decode_entries, iter_entries
from kafkasim.storage.records.legacy import (
    MAGIC_V0,
    MAGIC_V1,
    LegacyRecord,
    decode_legacy,
    encode_legacy,
)
from kafkasim.storage.records.validation import (
    check_produce_records,
    validate_batch_records,
    validate_leader_batch,
)

__all__ = [
    "ATTRIBUTES_OFFSET",
    "BASE_OFFSET_OFFSET",
    "BASE_SEQUENCE_OFFSET",
    "CRC_OFFSET",
    "FIRST_TIMESTAMP_OFFSET",
    "LAST_OFFSET_DELTA_OFFSET",
    "LENGTH_OFFSET",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "MAGIC_V0",
    "MAGIC_V1",
    "MAGIC_V2",
    "MAX_TIMESTAMP_OFFSET",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "PARTITION_LEADER_EPOCH_OFFSET",
    "PRODUCER_EPOCH_OFFSET",
    "PRODUCER_ID_OFFSET",
    "RECORDS_COUNT_OFFSET",
    "RECORD_BATCH_OVERHEAD",
    "BatchHeader",
    "CompressionType",
    "ControlRecordType",
    "EndTransactionMarker",
    "Header",
    "LegacyRecord",
    "LogEntryHeader",
    "Record",
    "RecordBatchBuilder",
    "TimestampType",
    "check_produce_records",
    "compress",
    "compute_crc",
    "control_record_key",
    "decode_batch",
    "decode_entries",
    "decode_legacy",
    "decompress",
    "encode_batch",
    "encode_control_batch",
    "encode_empty_batch",
    "encode_legacy",
    "increment_sequence",
    "iter_batches",
    "iter_entries",
    "parse_control_key",
    "parse_end_transaction_marker",
    "peek_magic",
    "record_size_upper_bound",
    "set_base_offset",
    "set_last_offset",
    "set_log_append_time",
    "set_max_timestamp",
    "set_partition_leader_epoch",
    "validate_batch",
    "validate_batch_records",
    "validate_leader_batch",
]
