"""Encoded size of the same records in message formats v0, v1 and v2, per codec.

The table in ``docs/record-formats.md`` is this script's output. The records are
deterministic, so the sizes are reproducible (only lz4/zstd library versions could move a few
bytes): key ``user-%05d`` (10 bytes), value a 100-byte JSON-ish event, timestamps 1 ms apart.
v2 is one batch of N records; v0/v1 are N messages, or one wrapper message when compressed.

``--throughput`` also measures encode/decode speed of one v2 batch of 1000 such records
(uncompressed) against a bare loop that only ``struct.pack_into``-s the same bytes per record
into a preallocated buffer: the floor for any pure-Python encoder of this format. Only ratios
are meaningful on a shared machine.

Run: ``python -m bench.record_sizes [--throughput]``.
"""

from __future__ import annotations

import argparse
import struct
import timeit
from collections.abc import Callable

from kafkasim.storage.records import (
    RECORD_BATCH_OVERHEAD,
    CompressionType,
    RecordBatchBuilder,
    decode_batch,
    encode_batch,
    encode_legacy,
)

COUNTS = (1, 10, 100, 1000)
BASE_TIMESTAMP = 1_700_000_000_000


def make_records(count: int) -> list[tuple[int, bytes, bytes]]:
    """``count`` records: 10-byte key, 100-byte value, timestamps 1 ms apart."""
    records = []
    for i in range(count):
        key = b"user-%05d" % (i % 100_000)
        value = (
            b'{"user":%05d,"event":"page_view","page":"/products/%04d","ms":%d}'
            % (i % 100_000, (i * 37) % 10_000, i * 13 % 1000)
        ).ljust(100, b" ")
        assert len(key) == 10 and len(value) == 100
        records.append((BASE_TIMESTAMP + i, key, value))
    return records


def size_table() -> list[str]:
    """Markdown rows: records, codec, v0, v1, v2 bytes and v2 bytes per record."""
    rows = [
        "| records | codec | v0 bytes | v1 bytes | v2 bytes | v2 bytes/record |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for count in COUNTS:
        records = make_records(count)
        for codec in CompressionType:
            v2 = len(encode_batch(records, compression=codec))
            if codec == CompressionType.ZSTD:
                v0 = v1 = "n/a"  # zstd exists only in v2
            else:
                v0 = str(len(encode_legacy(records, magic=0, compression=codec)))
                v1 = str(len(encode_legacy(records, magic=1, compression=codec)))
            rows.append(f"| {count} | {codec.kafka_name} | {v0} | {v1} | {v2} | {v2 / count:.1f} |")
    return rows


def _best_seconds(
    fns: list[Callable[[], object]], number: int = 20, rounds: int = 15
) -> list[float]:
    """Best time per call of each function; the functions take turns in every round so that
    load from other processes hits them alike."""
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            best[i] = min(best[i], timeit.timeit(fn, number=number) / number)
    return best


def throughput() -> list[str]:
    """Records/s for one v2 batch of 1000 records, and the bare struct-packing floor."""
    records = make_records(1000)
    encoded = encode_batch(records)
    record_area = len(encoded) - RECORD_BATCH_OVERHEAD

    def encode_with_builder() -> bytes:
        builder = RecordBatchBuilder()
        append = builder.append
        for timestamp, key, value in records:
            append(timestamp, key, value)
        return builder.build()

    # The floor: the same record bytes, but with every varint precomputed into a fixed struct
    # layout, so each record costs exactly one pack_into call plus the loop.
    _, decoded = decode_batch(encoded)
    layouts = []
    view = memoryview(encoded)
    pos = RECORD_BATCH_OVERHEAD
    for record in decoded:
        size = record.size_in_bytes
        raw = bytes(view[pos : pos + size])
        # Tail: key (10) + value length varint (2) + value (100) + header count (1).
        head = raw[: size - 113]
        value_len = raw[len(head) + 10 : len(head) + 12]
        layouts.append((struct.Struct(f">{len(head)}s10s2s100sB"), head, value_len))
        pos += size

    def bare_struct_pack() -> bytes:
        buf = bytearray(RECORD_BATCH_OVERHEAD + record_area)
        at = RECORD_BATCH_OVERHEAD
        for (layout, head, value_len), (_, key, value) in zip(layouts, records, strict=True):
            layout.pack_into(buf, at, head, key, value_len, value, 0)
            at += layout.size
        return bytes(buf)

    assert bare_struct_pack()[RECORD_BATCH_OVERHEAD:] == encoded[RECORD_BATCH_OVERHEAD:]

    lines = ["| operation (1000 records, 10 B key + 100 B value, uncompressed) | records/s |"]
    lines.append("|---|---:|")
    named: list[tuple[str, Callable[[], object]]] = [
        ("bare loop: one struct.pack_into per record (floor)", bare_struct_pack),
        ("encode_batch", lambda: encode_batch(records)),
        ("RecordBatchBuilder.append x 1000 + build", encode_with_builder),
        ("decode_batch (CRC check + 1000 Record objects)", lambda: decode_batch(encoded)),
    ]
    seconds = _best_seconds([fn for _, fn in named])
    for (name, _), took in zip(named, seconds, strict=True):
        lines.append(f"| {name} | {1000 / took:,.0f} ({seconds[0] / took:.2f}x floor) |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--throughput", action="store_true", help="also measure encode speed")
    args = parser.parse_args()
    print("\n".join(size_table()))
    if args.throughput:
        print()
        print("\n".join(throughput()))


if __name__ == "__main__":
    main()
