"""Compression codecs with the framing Kafka writes, so that Kafka's own clients can read them.

The codec id sits in bits 0-2 of a batch's (or legacy message's) attributes. What the
compressed payload looks like for each codec — byte for byte what Kafka's Java streams
produce and accept:

========  ====  ================================================================================
name      id    payload
========  ====  ================================================================================
none      0     the records themselves
gzip      1     one gzip member (RFC 1952), as ``java.util.zip.GZIPOutputStream`` writes it; on
                read any number of concatenated members is accepted
snappy    2     xerial snappy-java ``SnappyOutputStream`` framing::

                    magic   8 bytes  82 53 4E 41 50 50 59 00   ("\\x82SNAPPY\\x00")
                    version int32 BE 1
                    compat  int32 BE 1
                    then per 32 KiB of input: length int32 BE + one *raw* snappy block

                on read, a payload without that magic is taken as one raw snappy block (what
                non-Java clients such as librdkafka may send), and a repeated header between
                blocks (concatenated streams) is skipped, as snappy-java does
lz4       3     the LZ4 *frame* format (v1.5.1) as ``KafkaLZ4BlockOutputStream`` writes it::

                    magic   04 22 4D 18          (0x184D2204 little-endian)
                    FLG     0x60                  version 01, block independence, no checksums
                    BD      0x40                  64 KiB maximum block size
                    HC      (xxh32(FLG BD) >> 8) & 0xFF
                    blocks  size uint32 LE (bit 31 set: stored uncompressed) + lz4 block
                    end     00 00 00 00

                on read Kafka's rules apply: version 1, reserved bits 0, independent blocks,
                64 KiB to 4 MiB blocks, optional content size, block and content checksums
zstd      4     one standard zstd frame (RFC 8878), level 3 like Kafka's default
========  ====  ================================================================================

Magic 0 and lz4 (KAFKA-3160): Kafka before 0.10 computed the lz4 header checksum over the
magic number *and* the descriptor (bytes 0-5) instead of the descriptor alone (bytes 4-5). Kafka
keeps that bug for message format v0 only: it *writes* the broken checksum for magic 0 and
*ignores* the checksum when reading magic 0. :func:`compress` and :func:`decompress` take the
message format's ``magic`` and do exactly the same, so a v0 lz4 message set that we write is
what an 0.8/0.9 client expects, and we read what they wrote.

Errors: a payload that does not decompress raises :class:`~common.errors.CorruptRecordError`
(never a codec's own exception type); an unknown codec name raises
:class:`~common.errors.UnsupportedCompressionTypeError`.

Thread-safety: every function is pure (bytes in, bytes out) and safe to call from any thread.
"""

from __future__ import annotations

import struct
import zlib
from enum import IntEnum

import cramjam

from kafkasim.common.errors import CorruptRecordError, UnsupportedCompressionTypeError


class CompressionType(IntEnum):
    """A codec, valued by its id in the attributes' bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @property
    def kafka_name(self) -> str:
        """The name in ``compression.type`` and in Kafka's tools: ``none``, ``gzip``, ..."""
        return self.name.lower()

    @classmethod
    def from_name(cls, name: str) -> CompressionType:
        """The codec for a ``compression.type`` value (``"none"``, ``"gzip"``, ``"snappy"``,
        ``"lz4"``, ``"zstd"``); anything else raises UnsupportedCompressionTypeError."""
        try:
            return _BY_NAME[name]
        except KeyError:
            valid = ", ".join(_BY_NAME)
            raise UnsupportedCompressionTypeError(
                f"unknown compression type {name!r} (valid: {valid})"
            ) from None

    @classmethod
    def from_id(cls, codec_id: int) -> CompressionType:
        """The codec for an attributes id 0-4; other ids raise CorruptRecordError, because they
        only ever come from bytes on the wire or on disk."""
        # A tuple lookup, not ``cls(codec_id)``: every batch appended and read asks (an enum
        # call costs several times more).
        if 0 <= codec_id < len(_BY_ID):
            return _BY_ID[codec_id]
        raise CorruptRecordError(f"unknown compression type id {codec_id}")


_BY_NAME: dict[str, CompressionType] = {c.kafka_name: c for c in CompressionType}
_BY_ID: tuple[CompressionType, ...] = tuple(sorted(CompressionType))
assert all(codec == i for i, codec in enumerate(_BY_ID))
MAX_CODEC_ID = len(_BY_ID) - 1
"""The largest codec id Kafka knows (ids above it, up to 7, are refused)."""

# Kafka's defaults: Deflater.DEFAULT_COMPRESSION (6) for gzip, ZSTD_CLEVEL_DEFAULT (3) for zstd.
GZIP_DEFAULT_LEVEL = 6
ZSTD_DEFAULT_LEVEL = 3

_INT32_BE = struct.Struct(">i")
_UINT32_LE = struct.Struct("<I")


def compress(
    ctype: CompressionType, data: bytes, *, magic: int = 2, level: int | None = None
) -> bytes:
    """Compress ``data`` into the payload Kafka expects for ``ctype``.

    ``magic`` is the message format the payload goes into; it only matters for lz4 with magic 0
    (see the module doc). ``level`` overrides the codec's default level (gzip 1-9, zstd 1-22;
    ignored for snappy and lz4, like Kafka before KIP-390).
    """
    if ctype == CompressionType.NONE:
        return bytes(data)
    if ctype == CompressionType.GZIP:
        compressor = zlib.compressobj(
            GZIP_DEFAULT_LEVEL if level is None else level, zlib.DEFLATED, 31
        )
        return compressor.compress(data) + compressor.flush()
    if ctype == CompressionType.SNAPPY:
        return _xerial_snappy_compress(data)
    if ctype == CompressionType.LZ4:
        return _lz4_frame_compress(data, broken_header_checksum=magic == 0)
    if ctype == CompressionType.ZSTD:
        return bytes(
            cramjam.zstd.compress(data, level=ZSTD_DEFAULT_LEVEL if level is None else level)
        )
    raise UnsupportedCompressionTypeError(f"unknown compression type {ctype!r}")


def decompress(
    ctype: CompressionType, data: bytes | bytearray | memoryview, *, magic: int = 2
) -> bytes:
    """Decompress a payload written by Kafka (or by :func:`compress`).

    Raises CorruptRecordError for anything that does not decompress cleanly, whatever the codec.
    """
    try:
        if ctype == CompressionType.NONE:
            return bytes(data)
        if ctype == CompressionType.GZIP:
            return _gzip_decompress(data)
        if ctype == CompressionType.SNAPPY:
            return _xerial_snappy_decompress(data)
        if ctype == CompressionType.LZ4:
            return _lz4_frame_decompress(data, ignore_header_checksum=magic == 0)
        if ctype == CompressionType.ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except (cramjam.DecompressionError, zlib.error, ValueError, OverflowError) as exc:
        # ValueError/OverflowError cover codec bindings that reject absurd declared sizes.
        raise CorruptRecordError(f"{ctype.kafka_name} payload does not decompress: {exc}") from exc
    raise UnsupportedCompressionTypeError(f"unknown compression type {ctype!r}")


# --- gzip -------------------------------------------------------------------------------------


def _gzip_decompress(data: bytes | bytearray | memoryview) -> bytes:
    # Java's GZIPInputStream reads concatenated members, so we do too.
    out: list[bytes] = []
    rest = bytes(data)
    while True:
        d = zlib.decompressobj(31)
        out.append(d.decompress(rest))
        if not d.eof:
            raise CorruptRecordError("gzip payload is truncated")
        rest = d.unused_data
        if not rest:
            return b"".join(out)


# --- snappy (xerial framing) ------------------------------------------------------------------

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_VERSION = 1
XERIAL_COMPATIBLE_VERSION = 1
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", XERIAL_VERSION, XERIAL_COMPATIBLE_VERSION)
XERIAL_BLOCK_SIZE = 32 * 1024
"""snappy-java's ``SnappyOutputStream.DEFAULT_BLOCK_SIZE``: input bytes per block."""


def _xerial_snappy_compress(data: bytes) -> bytes:
    out = bytearray(XERIAL_HEADER)
    view = memoryview(data)
    pack = _INT32_BE.pack
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK_SIZE])
        out += pack(len(block))
        out += block
    return bytes(out)


def _xerial_snappy_decompress(data: bytes | bytearray | memoryview) -> bytes:
    view = memoryview(data)
    if bytes(view[:8]) != XERIAL_MAGIC:
        # Not xerial-framed: one raw snappy block, as snappy-java's reader falls back to.
        return bytes(cramjam.snappy.decompress_raw(view))
    if len(view) < len(XERIAL_HEADER):
        raise CorruptRecordError("xerial snappy header is truncated")
    out: list[bytes] = []
    pos = len(XERIAL_HEADER)
    end = len(view)
    while pos < end:
        if bytes(view[pos : pos + 8]) == XERIAL_MAGIC:
            # A second stream appended to the first: skip its header.
            pos += len(XERIAL_HEADER)
            continue
        if pos + 4 > end:
            raise CorruptRecordError(f"xerial snappy block length at byte {pos} is truncated")
        (size,) = _INT32_BE.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise CorruptRecordError(
                f"xerial snappy block at byte {pos - 4} declares {size} bytes, {end - pos} remain"
            )
        out.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + size])))
        pos += size
    return b"".join(out)


# --- lz4 (frame format) -----------------------------------------------------------------------

LZ4_FRAME_MAGIC = 0x184D2204
LZ4_FLG = 0x60
"""Version 01, independent blocks, no block checksum, no content size, no content checksum."""
LZ4_BD_64KB = 0x40
"""Block maximum size id 4 = 64 KiB (Kafka's ``BLOCKSIZE_64KB``)."""
LZ4_BLOCK_SIZE = 64 * 1024
LZ4_INCOMPRESSIBLE_MASK = 0x80000000
_LZ4_END_MARK = b"\x00\x00\x00\x00"


def _lz4_frame_compress(data: bytes, *, broken_header_checksum: bool) -> bytes:
    header = bytearray(_UINT32_LE.pack(LZ4_FRAME_MAGIC))
    header.append(LZ4_FLG)
    header.append(LZ4_BD_64KB)
    # KAFKA-3160: magic-0 writers hash the 4 magic bytes too (see the module doc).
    hashed = header if broken_header_checksum else header[4:]
    header.append((xxh32(bytes(hashed)) >> 8) & 0xFF)
    out = header
    view = memoryview(data)
    pack = _UINT32_LE.pack
    compress_block = cramjam.lz4.compress_block
    for start in range(0, len(view), LZ4_BLOCK_SIZE):
        chunk = view[start : start + LZ4_BLOCK_SIZE]
        block = compress_block(chunk, store_size=False)
        if len(block) >= len(chunk):
            # Incompressible: store it raw with the high bit set, as Kafka's writer does.
            out += pack(len(chunk) | LZ4_INCOMPRESSIBLE_MASK)
            out += chunk
        else:
            out += pack(len(block))
            out += block
    out += _LZ4_END_MARK
    return bytes(out)


def lz4_header_checksum(descriptor: bytes) -> int:
    """The frame descriptor's HC byte: the second byte of xxh32(descriptor, seed 0)."""
    return (xxh32(descriptor) >> 8) & 0xFF


def _lz4_frame_decompress(
    data: bytes | bytearray | memoryview, *, ignore_header_checksum: bool
) -> bytes:
    frame = bytearray(data)
    if len(frame) < 7:
        raise CorruptRecordError(f"lz4 frame of {len(frame)} bytes is shorter than its header")
    (magic,) = _UINT32_LE.unpack_from(frame, 0)
    if magic != LZ4_FRAME_MAGIC:
        raise CorruptRecordError(
            f"lz4 frame magic is {magic:#010x}, expected {LZ4_FRAME_MAGIC:#010x}"
        )
    flg = frame[4]
    bd = frame[5]
    # The same rules as Kafka's FLG/BD validation: anything else Kafka cannot read either.
    if flg >> 6 != 1:
        raise CorruptRecordError(f"lz4 frame version {flg >> 6} is unsupported")
    if flg & 0x03:
        raise CorruptRecordError("lz4 frame FLG reserved bits must be 0")
    if not flg & 0x20:
        raise CorruptRecordError("lz4 frame with dependent blocks is unsupported")
    if bd & 0x8F or not 4 <= (bd >> 4) & 0x07 <= 7:
        raise CorruptRecordError(f"lz4 frame BD byte {bd:#04x} is invalid")
    hc_pos = 6 + (8 if flg & 0x08 else 0)
    if len(frame) <= hc_pos:
        raise CorruptRecordError("lz4 frame descriptor is truncated")
    expected_hc = lz4_header_checksum(bytes(frame[4:hc_pos]))
    if frame[hc_pos] != expected_hc:
        if not ignore_header_checksum:
            raise CorruptRecordError("lz4 frame descriptor checksum does not match")
        # Magic 0 (KAFKA-3160): ignore whatever the writer put there; the decoder below checks
        # the descriptor checksum, so hand it a correct one.
        frame[hc_pos] = expected_hc
    return bytes(cramjam.lz4.decompress(frame))


# --- xxHash32 ---------------------------------------------------------------------------------
# Only the lz4 frame descriptor (2 to 10 bytes) is hashed in Python; block data is never, so a
# plain implementation is fast enough and saves a dependency.

_P1 = 2654435761
_P2 = 2246822519
_P3 = 3266489917
_P4 = 668265263
_P5 = 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 of ``data`` (the LZ4 frame format's checksum)."""
    n = len(data)
    pos = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while pos + 16 <= n:
            a, b, c, d = struct.unpack_from("<4I", data, pos)
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            pos += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while pos + 4 <= n:
        (lane,) = struct.unpack_from("<I", data, pos)
        h = (_rotl((h + lane * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        h = (_rotl((h + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h
