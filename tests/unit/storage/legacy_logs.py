"""A partition directory as Kafka before 0.11 wrote it (message formats v0 and v1)."""

from __future__ import annotations

import struct
from pathlib import Path

from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.records.legacy import encode_legacy

T0 = 1_700_000_000_000


def write_legacy_partition(
    dir_: Path, *, magic: int, segments: int = 2, sets_per_segment: int = 12
) -> list[tuple[int, bytes]]:
    """Write ``segments`` segments of message sets (alternately uncompressed single messages
    and gzip wrappers of three) in format v``magic``, with an ``.index`` as Kafka 0.9/0.10
    wrote it (an entry every 100 bytes mapping the first offset of the appended message set
    to its position) and, for v1 only, a ``.timeindex``. Returns every (offset, value)."""
    dir_.mkdir(parents=True, exist_ok=True)
    written: list[tuple[int, bytes]] = []
    offset = 0
    for _ in range(segments):
        base = offset
        log = bytearray()
        index = bytearray()
        time_index = bytearray()
        since_index = 0
        for n in range(sets_per_segment):
            count = 3 if n % 2 else 1
            values = [b"value-%d" % (offset + i) for i in range(count)]
            data = encode_legacy(
                [(T0 + offset + i, b"k%d" % (offset + i), v) for i, v in enumerate(values)],
                magic=magic,
                base_offset=offset,
                compression=CompressionType.GZIP if count > 1 else CompressionType.NONE,
            )
            if since_index > 100:
                index += struct.pack(">ii", offset - base, len(log))
                time_index += struct.pack(">qi", T0 + offset + count - 1, offset + count - 1 - base)
                since_index = 0
            since_index += len(data)
            log += data
            written.extend((offset + i, v) for i, v in enumerate(values))
            offset += count
        name = f"{base:020d}"
        (dir_ / f"{name}.log").write_bytes(bytes(log))
        (dir_ / f"{name}.index").write_bytes(bytes(index))
        if magic == 1:
            (dir_ / f"{name}.timeindex").write_bytes(bytes(time_index))
    return written
