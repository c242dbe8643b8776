"""Kafka's binary protocol at the byte level, pure: a request frame in, a typed request out; a
response entity in, a size-prefixed frame out. No sockets (``node.kafka_server`` reads and
writes the frames) and no broker (``node.kafka_apis`` answers the requests).

The message schemas are kio's (Aiven's data types generated from Kafka's own JSON message
definitions): this module only picks the schema of an (api key, version), the header version
that goes with it (request header v1 or v2, response header v0 or v1; ApiVersions always
answers with header v0, so that a client of any version can read it), and converts plain
Python values into the field types kio's writers take (:func:`build`), so that the handlers
build answers of any version from one set of values.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import typing
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import NoneType, UnionType
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32

from kafkasim.common.errors import KafkaError

API_VERSIONS_KEY = 18
_KEY_VERSION = struct.Struct(">hh")
_SIZE = struct.Struct(">i")
_CORRELATION_ID = struct.Struct(">i")
_HEADER_V1_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id


class InvalidRequestFrameError(Exception):
    """A frame that is not a request this broker can read (Kafka closes the connection)."""


class UnsupportedVersionError(Exception):
    """An API key this broker does not serve, or a version of it outside the advertised
    range; ``correlation_id`` and ``client_id`` are read from the v1 header prefix (every
    header version starts with them) so that ApiVersions can still be answered.

    A plain exception, not a frozen dataclass: Python sets ``__traceback__`` on exceptions
    that pass through a ``contextlib.contextmanager``, which a frozen slotted class refuses."""

    def __init__(
        self, api_key: int, api_version: int, correlation_id: int, client_id: str | None
    ) -> None:
        super().__init__(api_key, api_version, correlation_id, client_id)
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id

    def __str__(self) -> str:
        return f"unsupported API key {self.api_key} version {self.api_version}"


@dataclass(frozen=True, slots=True)
class KafkaRequest:
    """One decoded request: its header fields, its kio body (of that API version) and where
    it came from."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    client_host: str = ""  # the peer's address as Kafka shows it ("/127.0.0.1")

    @property
    def api_name(self) -> str:
        return type(self.body).__name__.removesuffix("Request")


def decode_request(
    frame: bytes, supported: Mapping[int, tuple[int, int]], client_host: str = ""
) -> KafkaRequest:
    """A request frame (without its 4-byte size) → :class:`KafkaRequest`.

    ``supported``: {api key: (min version, max version)} served; ``client_host``: the peer
    (JoinGroup records it for DescribeGroups). Raises
    :class:`UnsupportedVersionError` for a key or version outside it and
    :class:`InvalidRequestFrameError` for bytes that do not parse as that request."""
    if len(frame) < _HEADER_V1_PREFIX.size:
        raise InvalidRequestFrameError(
            f"a request of {len(frame)} bytes is shorter than its header"
        )
    api_key, api_version = _KEY_VERSION.unpack_from(frame, 0)
    window = supported.get(api_key)
    if window is None or not window[0] <= api_version <= window[1]:
        try:
            header, _ = _read_header_v1(frame)
            correlation_id, client_id = header.correlation_id, header.client_id
        except Exception:
            correlation_id, client_id = _HEADER_V1_PREFIX.unpack_from(frame, 0)[2], None
        raise UnsupportedVersionError(api_key, api_version, correlation_id, client_id)
    schema = _request_schema(api_key, api_version)
    header_schema = RequestHeaderV2 if schema.__flexible__ else RequestHeaderV1
    try:
        # kio's native reader reserves memory for an array's declared length before it reads
        # an item: a garbled length would abort the process. The lengths are checked first.
        check_frame(schema, frame, check_frame(header_schema, frame, 0))
        header, offset = _reader(header_schema)(frame, 0)
        body, size = _reader(schema)(frame, offset)
    except Exception as e:
        detail = str(e) if isinstance(e, InvalidRequestFrameError) else f"{type(e).__name__}: {e}"
        raise InvalidRequestFrameError(
            f"api key {api_key} version {api_version}: {detail}"
        ) from None
    # Bytes after the request are ignored, as Kafka's parser ignores them (librdkafka's
    # Metadata v12 carries three).
    del size
    return KafkaRequest(
        api_key, api_version, header.correlation_id, header.client_id, body, client_host
    )


@dataclass(frozen=True, slots=True)
class EncodedBody:
    """A response body already in its wire form (``node.produce_response``):
    :func:`encode_response` writes it after the response header as it is (``flexible``: the
    header is v1, with tagged fields)."""

    data: bytes
    flexible: bool


def encode_response(request: KafkaRequest | UnsupportedVersionError, body: Any) -> bytes:
    """The size-prefixed response frame answering ``request`` with ``body`` (a kio response
    entity, or an :class:`EncodedBody` already in its wire form). ApiVersions answers with
    header v0 whatever its version (as Kafka does)."""
    if isinstance(body, EncodedBody):
        header = _CORRELATION_ID.pack(request.correlation_id)
        if body.flexible:
            header += b"\0"  # response header v1: no tagged fields
        return _SIZE.pack(len(header) + len(body.data)) + header + body.data
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    correlation_id = i32(request.correlation_id)
    if body.__flexible__ and request.api_key != API_VERSIONS_KEY:
        _writer(ResponseHeaderV1)(buffer, ResponseHeaderV1(correlation_id=correlation_id))
    else:
        _writer(ResponseHeaderV0)(buffer, ResponseHeaderV0(correlation_id=correlation_id))
    _writer(body.__class__)(buffer, body)
    size = buffer.tell() - 4
    buffer.seek(0)
    buffer.write(_SIZE.pack(size))
    # getvalue() hands over the buffer's bytes without copying them (a fetch answer carries
    # megabytes of records).
    return buffer.getvalue()


def response_schema(request: KafkaRequest) -> type[Any]:
    """The kio response class answering ``request`` (same API key and version)."""
    return _response_schema(request.api_key, request.api_version)


@functools.cache
def _response_schema(api_key: int, api_version: int) -> type[Any]:
    # kio resolves the class by its module path on every call: once per key and version here.
    return load_response_schema(api_key, api_version)


@functools.cache
def _request_schema(api_key: int, api_version: int) -> Any:
    try:
        return load_request_schema(api_key, api_version)
    except Exception as e:
        raise InvalidRequestFrameError(
            f"no schema for api key {api_key} version {api_version}"
        ) from e


@functools.cache
def _reader(entity: type[Any]) -> Any:
    return entity_reader(entity)


@functools.cache
def _writer(entity: type[Any]) -> Any:
    return entity_writer(entity)


def _read_header_v1(frame: bytes) -> tuple[Any, int]:
    header, size = _reader(RequestHeaderV1)(frame, 0)
    return header, size


# -- building entities of any version from plain values ----------------------------------------


@dataclass(frozen=True, slots=True)
class _Field:
    name: str
    kafka_type: str
    nullable: bool
    entity: type[Any] | None  # nested entity class (single or array), else None
    array: bool
    has_default: bool
    tag: int | None  # a tagged field's tag (flexible versions), else None


@functools.cache
def _fields(entity: Any) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(entity)
    out: list[_Field] = []
    for field in dataclasses.fields(entity):
        hint = hints[field.name]
        nullable = False
        if typing.get_origin(hint) in (UnionType, typing.Union):
            args = [a for a in typing.get_args(hint) if a is not NoneType]
            nullable = len(args) != len(typing.get_args(hint))
            hint = args[0]
        array = typing.get_origin(hint) is tuple
        inner = typing.get_args(hint)[0] if array else hint
        nested = inner if dataclasses.is_dataclass(inner) else None
        has_default = (
            field.default is not dataclasses.MISSING
            or field.default_factory is not dataclasses.MISSING
        )
        out.append(
            _Field(
                field.name,
                field.metadata.get("kafka_type", "entity"),
                nullable,
                nested if isinstance(nested, type) else None,
                array,
                has_default,
                field.metadata.get("tag"),
            )
        )
    return tuple(out)


_ZERO: dict[str, Any] = {
    "bool": False,
    "bytes": b"",
    "string": "",
    "records": None,
    "uuid": None,
    "float64": 0.0,
}


def build(entity: Any, values: Mapping[str, Any] | None = None, /, **more: Any) -> Any:
    """An instance of the kio class ``entity`` from plain values: ints for every integer and
    error code, milliseconds for time spans and timestamps (-1: none), lists of mappings for
    arrays of nested entities. A field ``entity`` lacks in this version is dropped, a field the
    values lack takes its schema default or zero: one set of values builds every version."""
    given = {**(values or {}), **more}
    kwargs: dict[str, Any] = {}
    for field in _fields(entity):
        if field.name not in given:
            if field.has_default:
                continue
            kwargs[field.name] = () if field.array else _zero(field)
            continue
        kwargs[field.name] = _convert(field, given[field.name])
    return entity(**kwargs)


def _zero(field: _Field) -> Any:
    if field.entity is not None:
        return None if field.nullable else build(field.entity)
    if field.kafka_type in _ZERO:
        zero = _ZERO[field.kafka_type]
        return None if zero is None and field.nullable else _convert(field, zero)
    return _convert(field, 0)


def _convert(field: _Field, value: Any) -> Any:
    if value is None:
        return None
    if field.array:
        return tuple(_convert_one(field, item) for item in value)
    return _convert_one(field, value)


def _convert_one(field: _Field, value: Any) -> Any:
    if field.entity is not None:
        return value if isinstance(value, field.entity) else build(field.entity, value)
    kind = field.kafka_type
    if kind == "error_code":
        code = _ERROR_CODES.get(value)
        return code if code is not None else ErrorCode(int(value))
    if kind in ("timedelta_i32", "timedelta_i64"):
        return value if isinstance(value, datetime.timedelta) else _millis(value)
    if kind == "datetime_i64":
        if isinstance(value, datetime.datetime):
            return value
        if value < 0:
            return None if field.nullable else _EPOCH
        return _EPOCH + _millis(value)
    if kind == "uuid":
        return value if isinstance(value, uuid.UUID) else uuid.UUID(int=int(value))
    return value


# Every known code by its number (an ErrorCode member is an int too, so it finds itself).
_ERROR_CODES: dict[int, ErrorCode] = {int(code): code for code in ErrorCode}
_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)
_ONE_MS = datetime.timedelta(milliseconds=1)


def _millis(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=int(value))


# Authorized operations not asked for (Kafka's "omitted" value in Metadata, DescribeCluster,
# DescribeGroups).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def error_message(error: KafkaError | None) -> str | None:
    """An error's message for a nullable ``error_message`` field: null for none or empty."""
    return (error.message or None) if error is not None else None


def group_by_topic(
    rows: Iterable[tuple[str, dict[str, Any]]],
) -> dict[str, list[dict[str, Any]]]:
    """Per-partition answers grouped by topic, in the order the topics first appear (Kafka's
    responses nest partitions in their topic)."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, row in rows:
        topics.setdefault(topic, []).append(row)
    return topics


def millis(value: datetime.timedelta | datetime.datetime | int | None, default: int = -1) -> int:
    """A kio time span or timestamp field back to milliseconds (``default`` for None)."""
    if value is None:
        return default
    if isinstance(value, datetime.timedelta):
        return value // _ONE_MS
    if isinstance(value, datetime.datetime):
        # Integer arithmetic: a float timestamp loses a millisecond on some values.
        return (value - _EPOCH) // _ONE_MS
    return value


# -- the structural check of a frame, before kio's reader builds anything ------------------

_FIXED_SIZE: dict[str, int] = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}


# One field as check_frame walks it: the field, its name in errors ("Entity.field") and
# whether its strings and arrays have the legacy (non-compact) layout.
_Step = tuple["_Field", str, bool]


@functools.cache
def _layout(entity: Any) -> tuple[tuple[_Step, ...], dict[int, _Step], bool, str]:
    """``entity``'s fields in wire order and its tagged fields by tag, as steps; whether it is
    flexible; its tagged-field section's name in errors. Made once per schema: the names were
    formatted again for every field of every request."""
    name = entity.__name__
    flexible = bool(entity.__flexible__)
    header = name == "RequestHeader"
    plain = tuple(
        # RequestHeader.client_id keeps the legacy string layout in flexible headers too.
        (f, f"{name}.{f.name}", not flexible or (header and f.name == "client_id"))
        for f in _fields(entity)
        if f.tag is None
    )
    tagged = {
        f.tag: (f, f"{name}.{f.name}", not flexible) for f in _fields(entity) if f.tag is not None
    }
    return plain, tagged, flexible, f"{name}: tagged fields"


def check_frame(entity: Any, frame: bytes, offset: int, end: int | None = None) -> int:
    """Walk ``frame`` from ``offset`` as the kio class ``entity`` lays it out, every array,
    string and byte length checked against the bytes left (nothing is built); the offset
    after it. Raises :class:`InvalidRequestFrameError` naming the field that does not fit."""
    end = len(frame) if end is None else end
    plain, tagged, flexible, where = _layout(entity)
    for step in plain:
        offset = _check_field(step, frame, offset, end, flexible)
    if flexible:
        count, offset = _uvarint(frame, offset, end, where)
        for _ in range(count):
            tag, offset = _uvarint(frame, offset, end, where)
            size, offset = _uvarint(frame, offset, end, where)
            stop = _skip(offset, size, end, f"{where}: tag {tag}")
            known = tagged.get(tag)
            if known is not None:
                _check_field(known, frame, offset, stop, flexible)
            offset = stop
    return offset


def _check_field(step: _Step, frame: bytes, offset: int, end: int, flexible: bool) -> int:
    field, where, legacy = step
    if not field.array:
        return _check_value(field, frame, offset, end, legacy=legacy, where=where)
    if flexible:
        count, offset = _uvarint(frame, offset, end, where)
        count -= 1
    else:
        count, offset = _signed(frame, offset, end, 4, where)
    if count < 0:
        return _null(count, offset, where)
    size = _FIXED_SIZE.get(field.kafka_type) if field.entity is None else None
    # Every item takes at least a byte: a count over the bytes left is a garbled count.
    if count > end - offset or (size is not None and count * size > end - offset):
        raise InvalidRequestFrameError(
            f"{where}: an array of {count} items at byte {offset}, {end - offset} bytes left"
        )
    if size is not None:
        return offset + count * size
    for _ in range(count):
        offset = _check_value(field, frame, offset, end, legacy=not flexible, where=where)
    return offset


def _check_value(
    field: _Field, frame: bytes, offset: int, end: int, *, legacy: bool, where: str
) -> int:
    if field.entity is not None:
        if field.nullable and not field.array and field.tag is None:
            marker, offset = _signed(frame, offset, end, 1, where)
            if marker < 0:
                return offset
        return check_frame(field.entity, frame, offset, end)
    kind = field.kafka_type
    size = _FIXED_SIZE.get(kind)
    if size is not None:
        return _skip(offset, size, end, where)
    if kind not in ("string", "bytes", "records"):
        raise InvalidRequestFrameError(f"{where}: no layout known for type {kind!r}")
    if legacy:
        length, offset = _signed(frame, offset, end, 2 if kind == "string" else 4, where)
    else:
        length, offset = _uvarint(frame, offset, end, where)
        length -= 1
    if length < 0:
        return _null(length, offset, where)
    return _skip(offset, length, end, where)


def _null(length: int, offset: int, where: str) -> int:
    if length != -1:
        raise InvalidRequestFrameError(f"{where}: a negative length {length} at byte {offset}")
    return offset


def _skip(offset: int, size: int, end: int, where: str) -> int:
    if size > end - offset:
        raise InvalidRequestFrameError(
            f"{where}: {size} bytes at byte {offset}, {end - offset} bytes left"
        )
    return offset + size


def _signed(frame: bytes, offset: int, end: int, width: int, where: str) -> tuple[int, int]:
    stop = _skip(offset, width, end, where)
    return int.from_bytes(frame[offset:stop], "big", signed=True), stop


def _uvarint(frame: bytes, offset: int, end: int, where: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if offset >= end:
            raise InvalidRequestFrameError(f"{where}: the frame ends inside a varint")
        byte = frame[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, offset
        shift += 7
        if shift > 28:
            raise InvalidRequestFrameError(f"{where}: a varint longer than 5 bytes")
