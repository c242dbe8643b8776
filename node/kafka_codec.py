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
from collections.abc import Mapping
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

API_VERSIONS_KEY = 18
_KEY_VERSION = struct.Struct(">hh")
_SIZE = struct.Struct(">i")
_HEADER_V1_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id


class InvalidRequestFrameError(Exception):
    """A frame that is not a request this broker can read (Kafka closes the connection)."""


@dataclass(frozen=True, slots=True)
class UnsupportedVersionError(Exception):
    """An API key this broker does not serve, or a version of it outside the advertised
    range; ``correlation_id`` and ``client_id`` are read from the v1 header prefix (every
    header version starts with them) so that ApiVersions can still be answered."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None

    def __str__(self) -> str:
        return f"unsupported API key {self.api_key} version {self.api_version}"


@dataclass(frozen=True, slots=True)
class KafkaRequest:
    """One decoded request: its header fields and its kio body (of that API version)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any

    @property
    def api_name(self) -> str:
        return type(self.body).__name__.removesuffix("Request")


def decode_request(frame: bytes, supported: Mapping[int, tuple[int, int]]) -> KafkaRequest:
    """A request frame (without its 4-byte size) → :class:`KafkaRequest`.

    ``supported``: {api key: (min version, max version)} served. Raises
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
    try:
        if schema.__flexible__:
            header, offset = _read_header_v2(frame)
        else:
            header, offset = _read_header_v1(frame)
        body, size = _reader(schema)(frame, offset)
    except Exception as e:
        raise InvalidRequestFrameError(
            f"api key {api_key} version {api_version}: {type(e).__name__}: {e}"
        ) from None
    # Bytes after the request are ignored, as Kafka's parser ignores them (librdkafka's
    # Metadata v12 carries three).
    del size
    return KafkaRequest(api_key, api_version, header.correlation_id, header.client_id, body)


def encode_response(request: KafkaRequest | UnsupportedVersionError, body: Any) -> bytes:
    """The size-prefixed response frame answering ``request`` with ``body`` (a kio response
    entity). ApiVersions answers with header v0 whatever its version (as Kafka does)."""
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    correlation_id = i32(request.correlation_id)
    if body.__flexible__ and request.api_key != API_VERSIONS_KEY:
        _writer(ResponseHeaderV1)(buffer, ResponseHeaderV1(correlation_id=correlation_id))
    else:
        _writer(ResponseHeaderV0)(buffer, ResponseHeaderV0(correlation_id=correlation_id))
    _writer(body.__class__)(buffer, body)
    frame = buffer.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    return bytes(frame)


def response_schema(request: KafkaRequest) -> type[Any]:
    """The kio response class answering ``request`` (same API key and version)."""
    return load_response_schema(request.api_key, request.api_version)


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


def _read_header_v2(frame: bytes) -> tuple[Any, int]:
    header, size = _reader(RequestHeaderV2)(frame, 0)
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
        return ErrorCode(int(value))
    if kind in ("timedelta_i32", "timedelta_i64"):
        return value if isinstance(value, datetime.timedelta) else _millis(value)
    if kind == "datetime_i64":
        if isinstance(value, datetime.datetime):
            return value
        if value < 0:
            return None if field.nullable else datetime.datetime.fromtimestamp(0, datetime.UTC)
        return datetime.datetime.fromtimestamp(value / 1000, datetime.UTC)
    if kind == "uuid":
        return value if isinstance(value, uuid.UUID) else uuid.UUID(int=int(value))
    return value


def _millis(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=int(value))


def millis(value: datetime.timedelta | datetime.datetime | int | None, default: int = -1) -> int:
    """A kio time span or timestamp field back to milliseconds (``default`` for None)."""
    if value is None:
        return default
    if isinstance(value, datetime.timedelta):
        return int(value / datetime.timedelta(milliseconds=1))
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return value
