"""Kafka's big-endian primitives: a cursor that reads them and a buffer that writes them.

Shared by the byte formats kafkasim reads and writes field by field: the consumer protocol
(``common.group_protocol``), the records of ``__consumer_offsets`` (``node.group_records``) and
of ``__transaction_state`` (``node.txn_log``).
These are Kafka's classic, non-flexible encodings::

    int8, int16, int32, int64   two's complement, big-endian
    string                int16 length + UTF-8; -1 is null where the field is nullable
    bytes                 int32 length + the bytes; -1 is null where the field is nullable
    [x]                   int32 count + the entries; -1 is null where the array is nullable

Errors: every decode failure (bytes that run out, a negative length or count, a null where
the field has none, invalid UTF-8, bytes left after the last field) raises
:class:`~common.errors.CorruptRecordError` (``CORRUPT_MESSAGE``) as ``"<what>: <problem>"``,
where *what* names the kind of record and the problem names the field. Encoding a value its
type cannot hold raises ``ValueError``: that is the caller's misuse, not bad input.
"""

from __future__ import annotations

import struct

from kafkasim.common.errors import CorruptRecordError, KafkaError
from kafkasim.common.sentinels import INT16_MAX, INT32_MAX

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class WireReader:
    """A cursor over the bytes of one record; every failure is CORRUPT_MESSAGE naming the
    record kind (``what``) and the field."""

    def __init__(self, data: bytes, what: str) -> None:
        self._data = data
        self._position = 0
        self._what = what

    def corrupt(self, problem: str) -> KafkaError:
        """The :class:`~common.errors.CorruptRecordError` to raise for *problem* in this record
        (for checks the caller makes)."""
        return CorruptRecordError(f"{self._what}: {problem}")

    def _take(self, size: int, field: str) -> bytes:
        left = len(self._data) - self._position
        if size > left:
            raise self.corrupt(
                f"truncated at {field}: needs {size} bytes at byte {self._position}, {left} left"
            )
        start = self._position
        self._position += size
        return self._data[start : self._position]

    def int8(self, field: str) -> int:
        value: int = _INT8.unpack(self._take(1, field))[0]
        return value

    def int16(self, field: str) -> int:
        value: int = _INT16.unpack(self._take(2, field))[0]
        return value

    def int32(self, field: str) -> int:
        value: int = _INT32.unpack(self._take(4, field))[0]
        return value

    def int64(self, field: str) -> int:
        value: int = _INT64.unpack(self._take(8, field))[0]
        return value

    def _utf8(self, length: int, field: str) -> str:
        raw = self._take(length, field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.corrupt(f"{field} is not valid UTF-8 ({e.reason})") from None

    def string(self, field: str) -> str:
        """A string that cannot be null: any negative length is corrupt."""
        length = self.int16(f"{field} length")
        if length < 0:
            raise self.corrupt(f"{field} has length {length}; it cannot be null")
        return self._utf8(length, field)

    def nullable_string(self, field: str) -> str | None:
        """A string, or ``None`` for length -1; any other negative length is corrupt."""
        length = self.int16(f"{field} length")
        if length == -1:
            return None
        if length < 0:
            raise self.corrupt(f"{field} has length {length}")
        return self._utf8(length, field)

    def bytes_(self, field: str) -> bytes:
        """Bytes that cannot be null: any negative length is corrupt."""
        length = self.int32(f"{field} length")
        if length < 0:
            raise self.corrupt(f"{field} has length {length}; it cannot be null")
        return self._take(length, field)

    def nullable_bytes(self, field: str) -> bytes | None:
        """Bytes, or ``None`` for length -1; any other negative length is corrupt."""
        length = self.int32(f"{field} length")
        if length == -1:
            return None
        if length < 0:
            raise self.corrupt(f"{field} has length {length}")
        return self._take(length, field)

    def count(self, field: str, entry_size_min: int) -> int:
        """An array's int32 count, checked against the bytes left (each entry takes at least
        *entry_size_min*) so that garbage cannot make us loop, or allocate, billions of
        times."""
        n = self.nullable_count(field, entry_size_min)
        if n is None:
            raise self.corrupt(f"{field} has count -1; it cannot be null")
        return n

    def nullable_count(self, field: str, entry_size_min: int) -> int | None:
        """As :meth:`count`, or ``None`` for count -1 (a null array)."""
        n = self.int32(f"{field} count")
        if n == -1:
            return None
        if n < 0:
            raise self.corrupt(f"{field} has count {n}; it cannot be null")
        return self.check_entries(n, field, entry_size_min)

    def check_entries(self, n: int, field: str, entry_size_min: int) -> int:
        """``n``, if the bytes left can hold ``n`` entries of at least ``entry_size_min``
        bytes each (for array counts in other encodings, such as the flexible versions')."""
        left = len(self._data) - self._position
        if n * entry_size_min > left:
            raise self.corrupt(
                f"{field} claims {n} entries but only {left} bytes are left at byte "
                f"{self._position}"
            )
        return n

    def done(self) -> None:
        """Check that the last field has been read: bytes left over are corrupt."""
        left = len(self._data) - self._position
        if left:
            raise self.corrupt(f"{left} unexpected bytes after the last field")


class WireWriter:
    """A buffer of Kafka's big-endian primitives; a value its type cannot hold is a
    ``ValueError`` naming the field."""

    def __init__(self) -> None:
        self._out = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self._out)

    def _int(self, fmt: struct.Struct, bits: int, value: int, field: str) -> None:
        if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise ValueError(f"{field} {value} does not fit in an int{bits}")
        self._out += fmt.pack(value)

    def int8(self, value: int, field: str) -> None:
        self._int(_INT8, 8, value, field)

    def int16(self, value: int, field: str) -> None:
        self._int(_INT16, 16, value, field)

    def int32(self, value: int, field: str) -> None:
        self._int(_INT32, 32, value, field)

    def int64(self, value: int, field: str) -> None:
        self._int(_INT64, 64, value, field)

    def count(self, n: int, field: str) -> None:
        """An array's int32 count (the caller writes the entries)."""
        if n > INT32_MAX:
            raise ValueError(f"{field} has {n} entries, more than an int32 holds")
        self._out += _INT32.pack(n)

    def nullable_count(self, n: int | None, field: str) -> None:
        """A nullable array's int32 count: -1 for ``None``."""
        if n is None:
            self._out += _INT32.pack(-1)
        else:
            self.count(n, field)

    def string(self, value: str, field: str) -> None:
        data = value.encode("utf-8")
        if len(data) > INT16_MAX:
            raise ValueError(f"{field} is {len(data)} UTF-8 bytes, more than {INT16_MAX}")
        self._out += _INT16.pack(len(data))
        self._out += data

    def nullable_string(self, value: str | None, field: str) -> None:
        if value is None:
            self._out += _INT16.pack(-1)
        else:
            self.string(value, field)

    def bytes_(self, value: bytes, field: str) -> None:
        self.count(len(value), f"{field} length")
        self._out += value

    def nullable_bytes(self, value: bytes | None, field: str) -> None:
        if value is None:
            self._out += _INT32.pack(-1)
        else:
            self.bytes_(value, field)
