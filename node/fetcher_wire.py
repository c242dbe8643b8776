"""A follower's fetch answers read straight off the wire, the records left where they arrived.

Parsing a 1 MiB ``FetchResponse`` with protobuf copies the records into the message's arena,
and reading ``records`` copies them again into a new ``bytes``: about 0.35 ms of a follower's
0.8 ms per MiB received (issue 19, measured with a bare gRPC stream serving 1 MiB answers).
:func:`decode_fetch_answer` is the follower's gRPC response decoder for ``ReplicaFetch``
(``GrpcTransport(response_decoders=...)``): it walks the protobuf wire format of the answer,
once per partition, and gives each partition's records as a ``memoryview`` slice of the bytes
gRPC handed over (no copy); every other field is parsed by protobuf itself from the
partition's bytes without the records field (a few dozen bytes).

The result (:class:`FetchAnswer`) reads like a ``pb.FetchResponse`` for what the fetcher uses
(``partitions``, each with ``topic``, ``partition``, ``error_code``, ``high_watermark``,
``log_start_offset``, ``records``), so the fetcher takes either (the simulation's transport
hands over protobuf messages). Protobuf's rules hold: fields in any order, unknown fields
skipped, a repeated ``records`` field's last occurrence wins; a malformed answer raises
:class:`FetchAnswerError` naming what is wrong (gRPC then fails the stream, as it does for an
answer protobuf cannot parse, and the fetcher reopens it after its backoff).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from kafkasim.common.errors import InvalidRecordError
from kafkasim.common.rpc import ResponseDecoder
from kafkasim.proto import FETCH_PARTITIONS_FIELD, FETCH_RECORDS_FIELD, METHOD_REPLICA_FETCH
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.storage.records.varint import raw_varint

# FetchResponse.partitions, FetchPartitionResponse.records (as apis_replica writes them).
_PARTITIONS = FETCH_PARTITIONS_FIELD
_RECORDS = FETCH_RECORDS_FIELD
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


class FetchAnswerError(ValueError):
    """A ``FetchResponse`` whose wire bytes are not valid protobuf."""


@dataclass(slots=True)
class FetchedPartition:
    """One partition of a fetch answer; ``records`` a view into the answer's bytes."""

    topic: str
    partition: int
    error_code: int
    error_message: str
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: memoryview
    aborted_transactions: list[pb.AbortedTransaction] = field(default_factory=list)


@dataclass(slots=True)
class FetchAnswer:
    """A ``FetchResponse`` as :func:`decode_fetch_answer` reads it."""

    error_code: int
    partitions: list[FetchedPartition]


def _varint(data: bytes | bytearray, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` (at most 10 bytes) and the position after it."""
    try:
        return raw_varint(data, pos, 10)
    except InvalidRecordError as e:
        raise FetchAnswerError(f"a bad varint at byte {pos}: {e}") from e


def _fields(data: bytes | bytearray, start: int, end: int) -> list[tuple[int, int, int, int, int]]:
    """Each field of the message in ``data[start:end]``: (number, wire type, where its key
    starts, where its value starts, where it ends); a length-delimited value is
    ``data[value_start:end]``."""
    out: list[tuple[int, int, int, int, int]] = []
    pos = start
    while pos < end:
        key_at = pos
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise FetchAnswerError(f"field number 0 at byte {key_at}")
        value_at = pos
        if wire == _VARINT:
            _, pos = _varint(data, pos)
        elif wire == _I64:
            pos += 8
        elif wire == _I32:
            pos += 4
        elif wire == _LEN:
            size, value_at = _varint(data, pos)
            pos = value_at + size
        else:
            raise FetchAnswerError(f"field {number} has wire type {wire} (groups are not used)")
        if pos > end:
            raise FetchAnswerError(f"field {number} at byte {key_at} runs past its message")
        out.append((number, wire, key_at, value_at, pos))
    return out


def _partition(data: bytes | bytearray, view: memoryview, start: int, end: int) -> FetchedPartition:
    records = view[0:0]
    kept: list[memoryview] = []
    last = start
    for number, wire, key_at, value_at, stop in _fields(data, start, end):
        if number == _RECORDS and wire == _LEN:
            records = view[value_at:stop]
            kept.append(view[last:key_at])
            last = stop
    kept.append(view[last:end])
    try:
        meta = pb.FetchPartitionResponse.FromString(b"".join(kept))
    except DecodeError as e:
        raise FetchAnswerError(
            f"a partition of the answer is not a FetchPartitionResponse: {e}"
        ) from e
    return FetchedPartition(
        topic=meta.topic,
        partition=meta.partition,
        error_code=meta.error_code,
        error_message=meta.error_message,
        high_watermark=meta.high_watermark,
        last_stable_offset=meta.last_stable_offset,
        log_start_offset=meta.log_start_offset,
        records=records,
        aborted_transactions=list(meta.aborted_transactions),
    )


def decode_fetch_answer(data: bytes | bytearray) -> FetchAnswer:
    """The ``FetchResponse`` in ``data`` (its wire bytes), the records not copied."""
    view = memoryview(data)
    partitions: list[FetchedPartition] = []
    rest: list[memoryview] = []
    for number, wire, key_at, value_at, stop in _fields(data, 0, len(data)):
        if number == _PARTITIONS and wire == _LEN:
            partitions.append(_partition(data, view, value_at, stop))
        else:
            rest.append(view[key_at:stop])
    error_code = 0
    if rest:
        try:
            error_code = pb.FetchResponse.FromString(b"".join(rest)).error_code
        except DecodeError as e:
            raise FetchAnswerError(f"the answer is not a FetchResponse: {e}") from e
    return FetchAnswer(error_code, partitions)


# The broker's gRPC transport decodes its follower's fetch answers this way (cli.broker).
FOLLOWER_DECODERS: dict[str, ResponseDecoder] = {METHOD_REPLICA_FETCH: decode_fetch_answer}
