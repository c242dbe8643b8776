"""Kafka record formats: RecordBatch v2 (magic 2) and the legacy message formats v0 and v1."""
