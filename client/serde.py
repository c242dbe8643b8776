"""Serializers and deserializers: Kafka's ``key.serializer``/``value.serializer`` (producer)
and ``key.deserializer``/``value.deserializer`` (consumer) config keys.

Each key takes a name or, as kafka-python's ``key_serializer`` does, a callable:

=========  ======================================  ========================================
name       serializer (producer)                   deserializer (consumer)
=========  ======================================  ========================================
``bytes``  bytes as they are (the default)         bytes as they are (the default)
``str``    ``str.encode`` (UTF-8)                  ``bytes.decode`` (UTF-8)
``json``   ``json.dumps`` (compact), UTF-8         ``json.loads``
=========  ======================================  ========================================

A callable takes the key or value and returns ``bytes`` (serializer) or whatever the caller
wants in ``ConsumerRecord.key``/``.value`` (deserializer). A ``None`` key or value (no key, a
tombstone) is never passed to either: it stays None, as Kafka's serializers map null to null.
Any other name, or a value that is neither a name nor a callable, is INVALID_CONFIG naming the
key (the producer's and consumer's ``ConfigDef`` declare the keys with these names as their
valid values). Serializing and deserializing are per record, as in Kafka.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final

__all__ = [
    "SERDE_NAMES",
    "Deserializer",
    "Serializer",
    "split_serde",
]

Serializer = Callable[[Any], bytes]
Deserializer = Callable[[bytes], Any]

SERDE_NAMES: Final = ("bytes", "str", "json")
"""The names the serializer and deserializer keys accept (``bytes`` is the default)."""


def _str_serializer(config_key: str) -> Serializer:
    def serialize(data: Any) -> bytes:
        if not isinstance(data, str):
            raise TypeError(f"{config_key}=str takes str, not {type(data).__name__}")
        return data.encode()

    return serialize


def _json_serializer(config_key: str) -> Serializer:
    def serialize(data: Any) -> bytes:
        try:
            return json.dumps(data, separators=(",", ":")).encode()
        except (TypeError, ValueError) as e:
            raise TypeError(f"{config_key}=json cannot serialize it: {e}") from None

    return serialize


def _str_deserializer(config_key: str) -> Deserializer:
    return bytes.decode


def _json_deserializer(config_key: str) -> Deserializer:
    return json.loads


_SERIALIZERS: Final[Mapping[str, Callable[[str], Serializer] | None]] = {
    "bytes": None,
    "str": _str_serializer,
    "json": _json_serializer,
}
_DESERIALIZERS: Final[Mapping[str, Callable[[str], Deserializer] | None]] = {
    "bytes": None,
    "str": _str_deserializer,
    "json": _json_deserializer,
}


def split_serde(
    config: Mapping[str, object], kind: str
) -> tuple[dict[str, object], Callable[[Any], Any] | None, Callable[[Any], Any] | None]:
    """``config`` without its callable ``key.KIND``/``value.KIND`` entries (``kind``:
    ``serializer`` or ``deserializer``), and the key's and the value's function (None: bytes
    as they are). Names are left in the config for its ``ConfigDef`` to validate, so that an
    unknown name or a value of the wrong type is refused naming the key."""
    table = _SERIALIZERS if kind == "serializer" else _DESERIALIZERS
    rest = dict(config)
    found: list[Callable[[Any], Any] | None] = []
    for name in (f"key.{kind}", f"value.{kind}"):
        raw = rest.get(name)
        if isinstance(raw, str):
            factory = table.get(raw.strip())
            found.append(None if factory is None else factory(name))
        elif callable(raw):
            del rest[name]
            found.append(raw)
        else:
            found.append(None)
    return rest, found[0], found[1]
