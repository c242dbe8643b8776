"""The Spark reader's decoding of one fetch: the records of ``[position, until)``, whatever
the message format of the entries holding them (no Spark needed)."""

from __future__ import annotations

import pytest

from kafkasim.common.types import TopicPartition
from kafkasim.spark.cluster_io import decode_columns
from kafkasim.storage.records.batch import TimestampType, encode_batch
from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.records.legacy import encode_legacy

T0 = 1_700_000_000_000


def _fetched() -> bytes:
    """0-2: a v0 gzip wrapper, 3-5: a v1 gzip wrapper, 6-8: a v2 batch with headers."""
    return b"".join(
        [
            encode_legacy(
                [(None, b"k%d" % o, b"v%d" % o) for o in range(3)],
                magic=0,
                compression=CompressionType.GZIP,
            ),
            encode_legacy(
                [(T0 + o, b"k%d" % o, b"v%d" % o) for o in range(3, 6)],
                magic=1,
                base_offset=3,
                compression=CompressionType.GZIP,
            ),
            encode_batch(
                [(T0 + o, b"k%d" % o, b"v%d" % o, (("h", b"x"),)) for o in range(6, 9)],
                base_offset=6,
            ),
        ]
    )


@pytest.mark.parametrize(
    ("position", "until", "next_position"),
    [(0, 9, 9), (1, 5, 5), (4, 8, 8), (2, 3, 3), (7, 100, 9)],
)
def test_a_range_inside_wrappers_and_batches_reads_exactly_its_records(
    position: int, until: int, next_position: int
) -> None:
    chunk, after = decode_columns(TopicPartition("t", 0), _fetched(), position, until)
    assert after == next_position
    wanted = range(position, min(until, 9))
    assert chunk.offsets == list(wanted)
    assert chunk.values == [b"v%d" % o for o in wanted]
    assert chunk.keys == [b"k%d" % o for o in wanted]
    assert chunk.timestamps == [-1 if o < 3 else T0 + o for o in wanted]
    assert chunk.timestamp_types == [
        int(TimestampType.NO_TIMESTAMP_TYPE if o < 3 else TimestampType.CREATE_TIME) for o in wanted
    ]
    assert chunk.headers == [(("h", b"x"),) if o >= 6 else () for o in wanted]
