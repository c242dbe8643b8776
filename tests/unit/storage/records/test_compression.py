"""Codecs with Kafka's framing: what Kafka's Java streams write, byte for byte where it matters."""

from __future__ import annotations

import contextlib
import gzip
import os
import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkasim.common.errors import CorruptRecordError, UnsupportedCompressionTypeError
from kafkasim.storage.records.compression import (
    LZ4_BLOCK_SIZE,
    XERIAL_BLOCK_SIZE,
    XERIAL_HEADER,
    CompressionType,
    compress,
    decompress,
    lz4_header_checksum,
    xxh32,
)

CODECS = list(CompressionType)
COMPRESSED = [c for c in CompressionType if c != CompressionType.NONE]

# Random bytes do not compress (exercises "stored" blocks); repeated text compresses well.
RANDOM_200K = os.urandom(200_000)
TEXT_200K = b"kafkasim record value " * 9_100


# --- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "ctype", "codec_id"),
    [
        ("none", CompressionType.NONE, 0),
        ("gzip", CompressionType.GZIP, 1),
        ("snappy", CompressionType.SNAPPY, 2),
        ("lz4", CompressionType.LZ4, 3),
        ("zstd", CompressionType.ZSTD, 4),
    ],
)
def test_kafka_names_and_ids(name: str, ctype: CompressionType, codec_id: int) -> None:
    assert CompressionType.from_name(name) is ctype
    assert ctype.kafka_name == name
    assert int(ctype) == codec_id
    assert CompressionType.from_id(codec_id) is ctype


@pytest.mark.parametrize("name", ["GZIP", "brotli", "", "producer"])
def test_unknown_name_is_unsupported_compression_type_naming_the_value(name: str) -> None:
    with pytest.raises(UnsupportedCompressionTypeError, match=repr(name)):
        CompressionType.from_name(name)


@pytest.mark.parametrize("codec_id", [5, 6, 7, 8, -1])
def test_unknown_id_from_the_wire_is_corrupt(codec_id: int) -> None:
    # -1 too: the lookup is a tuple's, and a negative index must not wrap to ZSTD.
    with pytest.raises(CorruptRecordError, match=f"id {codec_id}"):
        CompressionType.from_id(codec_id)


# --- round trips ------------------------------------------------------------------------------


@settings(deadline=None)
@given(
    ctype=st.sampled_from(CODECS),
    magic=st.sampled_from([0, 1, 2]),
    data=st.binary(max_size=3000) | st.binary(max_size=40).map(lambda b: b * 500),
)
def test_round_trip_every_codec_and_magic(ctype: CompressionType, magic: int, data: bytes) -> None:
    assert decompress(ctype, compress(ctype, data, magic=magic), magic=magic) == data


@pytest.mark.parametrize("ctype", CODECS)
@pytest.mark.parametrize("data", [b"", RANDOM_200K, TEXT_200K], ids=["empty", "random", "text"])
def test_round_trip_across_block_boundaries(ctype: CompressionType, data: bytes) -> None:
    # 200 KB spans several 32 KiB snappy blocks and 64 KiB lz4 blocks.
    assert decompress(ctype, compress(ctype, data)) == data
    assert decompress(ctype, memoryview(compress(ctype, data))) == data


def test_levels_are_honoured_where_kafka_has_them() -> None:
    fast = compress(CompressionType.GZIP, TEXT_200K, level=1)
    best = compress(CompressionType.GZIP, TEXT_200K, level=9)
    assert decompress(CompressionType.GZIP, fast) == decompress(CompressionType.GZIP, best)
    z1 = compress(CompressionType.ZSTD, TEXT_200K, level=1)
    assert decompress(CompressionType.ZSTD, z1) == TEXT_200K


# --- gzip -------------------------------------------------------------------------------------


def test_gzip_is_a_plain_gzip_member() -> None:
    payload = compress(CompressionType.GZIP, TEXT_200K)
    assert payload[:3] == b"\x1f\x8b\x08"  # gzip magic + deflate
    assert gzip.decompress(payload) == TEXT_200K


def test_gzip_concatenated_members_are_read_like_javas_gzip_input_stream() -> None:
    payload = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress(CompressionType.GZIP, payload) == b"first second"


# --- snappy (xerial) --------------------------------------------------------------------------


def _xerial_blocks(payload: bytes) -> list[bytes]:
    assert payload[:16] == XERIAL_HEADER
    blocks: list[bytes] = []
    pos = 16
    while pos < len(payload):
        (size,) = struct.unpack_from(">i", payload, pos)
        blocks.append(payload[pos + 4 : pos + 4 + size])
        pos += 4 + size
    assert pos == len(payload)
    return blocks


def test_snappy_header_is_xerial_magic_version_1_compatible_1() -> None:
    # "\x82SNAPPY\x00", then int32 BE version 1 and int32 BE minimum compatible version 1.
    assert bytes.fromhex("82534e41505059000000000100000001") == XERIAL_HEADER
    assert compress(CompressionType.SNAPPY, b"") == XERIAL_HEADER


def test_snappy_blocks_are_raw_snappy_of_32k_input_like_snappy_output_stream() -> None:
    blocks = _xerial_blocks(compress(CompressionType.SNAPPY, RANDOM_200K))
    raw = [bytes(cramjam.snappy.decompress_raw(b)) for b in blocks]
    assert [len(r) for r in raw[:-1]] == [XERIAL_BLOCK_SIZE] * (len(raw) - 1)
    assert b"".join(raw) == RANDOM_200K


def test_snappy_reader_accepts_plain_raw_snappy() -> None:
    raw = bytes(cramjam.snappy.compress_raw(TEXT_200K))
    assert decompress(CompressionType.SNAPPY, raw) == TEXT_200K


def test_snappy_reader_skips_the_header_of_a_concatenated_stream() -> None:
    a = compress(CompressionType.SNAPPY, b"first ")
    b = compress(CompressionType.SNAPPY, b"second")
    assert decompress(CompressionType.SNAPPY, a + b) == b"first second"


# --- lz4 (frame) ------------------------------------------------------------------------------


def test_xxh32_known_vectors() -> None:
    # Reference values of xxHash32 with seed 0 (xxHash's sanity checks / python-xxhash docs).
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abc") == 0x32D153FF
    assert xxh32(b"Nobody inspects the spammish repetition") == 0xE2293B2F


def test_header_checksum_agrees_with_liblz4() -> None:
    # cramjam's frame encoder (the reference lz4 library) writes its own descriptor + HC;
    # our checksum of its descriptor must reproduce its HC byte.
    for frame in (
        bytes(cramjam.lz4.compress(b"x" * 1000)),
        _liblz4_frame(b"x" * 1000, content_checksum=True),
        _liblz4_frame(b"x" * 1000, content_checksum=False),
    ):
        assert lz4_header_checksum(frame[4:6]) == frame[6]


def test_lz4_frame_descriptor_is_exactly_kafkas() -> None:
    frame = compress(CompressionType.LZ4, TEXT_200K)
    assert frame[:4] == b"\x04\x22\x4d\x18"  # magic 0x184D2204, little-endian
    flg, bd, hc = frame[4], frame[5], frame[6]
    assert flg >> 6 == 0b01, "version 01"
    assert flg >> 5 & 1 == 1, "block independence: Kafka's reader rejects dependent blocks"
    assert flg >> 4 & 1 == 0, "no block checksum"
    assert flg >> 3 & 1 == 0, "no content size"
    assert flg >> 2 & 1 == 0, "no content checksum"
    assert flg & 0b11 == 0, "reserved bits"
    assert flg == 0x60
    assert (bd >> 4) & 0b111 == 4, "block maximum size 64 KiB"
    assert bd & 0x8F == 0, "BD reserved bits"
    assert hc == (xxh32(bytes([flg, bd])) >> 8) & 0xFF == 0x82


def _lz4_blocks(frame: bytes) -> list[tuple[bool, bytes]]:
    blocks: list[tuple[bool, bytes]] = []
    pos = 7
    while True:
        (word,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if word == 0:
            assert pos == len(frame), "end mark is last (no content checksum)"
            return blocks
        size = word & 0x7FFFFFFF
        blocks.append((not word & 0x80000000, frame[pos : pos + size]))
        pos += size


def test_lz4_blocks_hold_at_most_64k_and_incompressible_ones_are_stored() -> None:
    blocks = _lz4_blocks(compress(CompressionType.LZ4, RANDOM_200K))
    assert all(not compressed for compressed, _ in blocks)  # random data: stored raw
    assert b"".join(data for _, data in blocks) == RANDOM_200K
    assert [len(d) for _, d in blocks[:-1]] == [LZ4_BLOCK_SIZE] * (len(blocks) - 1)
    text_blocks = _lz4_blocks(compress(CompressionType.LZ4, TEXT_200K))
    assert all(compressed for compressed, _ in text_blocks)


def test_lz4_frames_are_readable_by_the_reference_decoder() -> None:
    frame = compress(CompressionType.LZ4, TEXT_200K)
    assert bytes(cramjam.lz4.decompress(frame)) == TEXT_200K


def _liblz4_frame(data: bytes, *, content_checksum: bool) -> bytes:
    # liblz4 always adds block checksums in this mode; content checksum on request.
    compressor = cramjam.lz4.Compressor(block_linked=False, content_checksum=content_checksum)
    compressor.compress(data)
    return bytes(compressor.finish())


@pytest.mark.parametrize(
    "frame",
    [
        _liblz4_frame(TEXT_200K, content_checksum=True),
        _liblz4_frame(TEXT_200K, content_checksum=False),
    ],
    ids=["content-and-block-checksums", "block-checksums"],
)
def test_lz4_reader_accepts_the_optional_checksums_kafka_accepts(frame: bytes) -> None:
    assert decompress(CompressionType.LZ4, frame) == TEXT_200K


def test_lz4_dependent_blocks_are_rejected_like_kafka() -> None:
    # liblz4's default frame links blocks (FLG bit 5 clear), which Kafka's reader refuses; this
    # is why compress() writes its own frames instead of calling cramjam.lz4.compress.
    linked = bytes(cramjam.lz4.compress(TEXT_200K))
    assert not linked[4] & 0x20
    with pytest.raises(CorruptRecordError, match="dependent blocks"):
        decompress(CompressionType.LZ4, linked)


def test_lz4_magic_0_writes_and_ignores_the_kafka_3160_header_checksum() -> None:
    v0 = compress(CompressionType.LZ4, TEXT_200K, magic=0)
    v1 = compress(CompressionType.LZ4, TEXT_200K, magic=1)
    # The broken checksum hashes magic + FLG + BD; the correct one FLG + BD only.
    assert v0[6] == (xxh32(v0[0:6]) >> 8) & 0xFF
    assert v1[6] == (xxh32(v1[4:6]) >> 8) & 0xFF
    assert v0[6] != v1[6] and v0[:6] == v1[:6] and v0[7:] == v1[7:]
    assert decompress(CompressionType.LZ4, v0, magic=0) == TEXT_200K
    assert decompress(CompressionType.LZ4, v1, magic=0) == TEXT_200K
    with pytest.raises(CorruptRecordError, match="descriptor checksum"):
        decompress(CompressionType.LZ4, v0, magic=1)


# --- zstd -------------------------------------------------------------------------------------


def test_zstd_is_one_standard_frame() -> None:
    payload = compress(CompressionType.ZSTD, TEXT_200K)
    assert payload[:4] == b"\x28\xb5\x2f\xfd"  # zstd frame magic 0xFD2FB528 little-endian
    assert bytes(cramjam.zstd.decompress(payload)) == TEXT_200K


# --- corruption -------------------------------------------------------------------------------


@pytest.mark.parametrize("ctype", [CompressionType.GZIP, CompressionType.LZ4, CompressionType.ZSTD])
def test_every_truncation_of_a_self_terminating_payload_is_corrupt(ctype: CompressionType) -> None:
    # gzip, lz4 frames and zstd frames carry an end marker, so any cut is detectable.
    payload = compress(ctype, TEXT_200K[:5000])
    for cut in range(len(payload)):
        with pytest.raises(CorruptRecordError):
            decompress(ctype, payload[:cut])


def test_snappy_truncation_is_corrupt_except_at_block_boundaries() -> None:
    # xerial framing has no end marker: a cut exactly between blocks reads as less data. The
    # batch CRC around the payload is what catches that; here only the exception type matters.
    data = RANDOM_200K[:70_000]
    payload = compress(CompressionType.SNAPPY, data)
    for cut in range(len(payload)):
        try:
            out = decompress(CompressionType.SNAPPY, payload[:cut])
        except CorruptRecordError:
            continue
        assert data.startswith(out) and len(out) % XERIAL_BLOCK_SIZE == 0


@settings(deadline=None)
@given(ctype=st.sampled_from(COMPRESSED), garbage=st.binary(max_size=300))
def test_garbage_never_raises_anything_but_corrupt_record(
    ctype: CompressionType, garbage: bytes
) -> None:
    with contextlib.suppress(CorruptRecordError):
        decompress(ctype, garbage)


@settings(deadline=None)
@given(
    ctype=st.sampled_from(COMPRESSED),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), min_size=1, max_size=4),
)
def test_flipped_bytes_never_raise_anything_but_corrupt_record(
    ctype: CompressionType, flips: list[tuple[int, int]]
) -> None:
    payload = bytearray(compress(ctype, TEXT_200K[:2000] + RANDOM_200K[:500]))
    for where, mask in flips:
        payload[where % len(payload)] ^= mask
    with contextlib.suppress(CorruptRecordError):
        decompress(ctype, bytes(payload))


def test_gzip_with_a_bad_trailer_crc_is_corrupt() -> None:
    payload = bytearray(compress(CompressionType.GZIP, b"hello"))
    payload[-8] ^= 0xFF  # CRC32 of the member's data
    with pytest.raises(CorruptRecordError):
        decompress(CompressionType.GZIP, bytes(payload))
