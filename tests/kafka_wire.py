"""Kafka request frames and response frames as the tests write and read them: a client's side
of the wire, built with kio's writers and readers (the broker's side is
``node.kafka_codec``)."""

from __future__ import annotations

import io
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from kafkasim.node.kafka_codec import build

API_VERSIONS, METADATA, PRODUCE = 18, 3, 0
_SIZE = struct.Struct(">i")


def request_frame(
    api_key: int,
    version: int,
    correlation_id: int = 1,
    client_id: str | None = "kafka-wire-test",
    /,
    **values: Any,
) -> bytes:
    """A request frame without its size prefix: the header version the request's schema names
    (v1, or v2 for flexible versions) and the body built from ``values``."""
    schema = load_request_schema(api_key, version)
    header_schema = schema.__header_schema__
    header = header_schema(
        request_api_key=i16(api_key),
        request_api_version=i16(version),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    buffer = io.BytesIO()
    entity_writer(header_schema)(buffer, header)
    entity_writer(schema)(buffer, build(schema, values))
    return buffer.getvalue()


def sized(frame: bytes) -> bytes:
    """``frame`` with its 4-byte size prefix, as it goes on the wire."""
    return _SIZE.pack(len(frame)) + frame


def read_response(frame: bytes, api_key: int, version: int) -> tuple[int, Any]:
    """(correlation id, kio body) of a response frame without its size prefix: header v1 for
    flexible versions, v0 otherwise and for ApiVersions; every byte must be read."""
    schema = load_response_schema(api_key, version)
    flexible_header = schema.__flexible__ and api_key != API_VERSIONS
    header_schema = ResponseHeaderV1 if flexible_header else ResponseHeaderV0
    header, offset = entity_reader(header_schema)(frame, 0)
    body, size = entity_reader(schema)(frame, offset)
    assert offset + size == len(frame), f"{len(frame) - offset - size} bytes left over"
    return int(header.correlation_id), body
