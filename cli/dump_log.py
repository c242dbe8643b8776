"""``kafkasim dump-log --files F``: print segments, indexes and snapshots as Kafka's
``kafka-dump-log.sh`` (DumpLogSegments, 2.8 output shape) does.

``.log``: one line per batch (``baseOffset: … isvalid: true``); with ``--deep-iteration`` one
``| offset: …`` line per record; ``--print-data-log`` adds keys and payloads (and implies
deep iteration); ``--offsets-decoder`` prints them decoded as ``__consumer_offsets`` records
(``key: offset_commit::group=g,partition=t-0 payload: offset=5``), as Kafka's
``GroupMetadataManager.formatRecordKeyAndValue`` does (and implies ``--print-data-log``).
Legacy v0/v1 message sets print one line per message. ``.index`` and ``.timeindex``: one line
per entry, then any entry that disagrees with the log (``Mismatches in …``);
``--index-sanity-check`` only runs the sanity check. ``.snapshot``: the producer-state entries.

A damaged file does not stop the dump: an unreadable batch is reported (``Found invalid batch
at position …``) and the dump goes on at the next position where a valid batch starts; a corrupt
snapshot is reported and the next file dumped. The exit status is 2 when anything invalid was
found (as ``verify-log``), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from kafkasim.common.errors import CorruptIndexError, CorruptRecordError, KafkaError, KafkasimError
from kafkasim.common.group_protocol import PROTOCOL_TYPE, decode_assignment
from kafkasim.node.group_records import (
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from kafkasim.storage import file_names
from kafkasim.storage.offset_index import OffsetIndex
from kafkasim.storage.producer_state import decode_snapshot
from kafkasim.storage.records.batch import (
    BatchHeader,
    ControlRecordType,
    compute_crc,
    decode_batch,
    parse_control_key,
    parse_end_transaction_marker,
)
from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.records.entry import (
    ENTRY_HEADER_BYTES,
    MIN_ENTRY_SIZE,
    entry_crc,
    parse_entry_header,
)
from kafkasim.storage.records.legacy import decode_legacy
from kafkasim.storage.records.validation import validate_batch_records
from kafkasim.storage.time_index import TimeIndex
from kafkasim.storage.txn_index import TransactionIndex


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "dump-log",
        help="print .log/.index/.timeindex/.txnindex/.snapshot files as kafka-dump-log does",
    )
    p.add_argument("--files", required=True, help="comma-separated data and index files to dump")
    p.add_argument(
        "--print-data-log",
        action="store_true",
        help="print the keys and payloads of records (implies --deep-iteration)",
    )
    p.add_argument(
        "--deep-iteration", action="store_true", help="print every record, not only batch headers"
    )
    p.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="if set, log data will be parsed as offset data from the __consumer_offsets topic",
    )
    p.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="only check that indexes are sane, without dumping them",
    )
    p.add_argument(
        "--verify-index-only",
        action="store_true",
        help="check index entries against the log without printing entries",
    )
    p.add_argument(
        "--max-message-size",
        type=int,
        default=5 * 1024 * 1024,
        help="largest batch size accepted while reading (default 5242880)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    files = [Path(f) for f in args.files.split(",") if f]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise ValueError(f"no such file: {', '.join(missing)}")
    offsets = args.offsets_decoder
    print_data = args.print_data_log or offsets
    deep = args.deep_iteration or print_data
    problems = 0
    for path in files:
        print(f"Dumping {path}")
        name = path.name
        if name.endswith(file_names.LOG_SUFFIX):
            problems += dump_log_file(
                path, deep, print_data, args.max_message_size, offsets_decoder=offsets
            )
        elif name.endswith(file_names.INDEX_SUFFIX):
            problems += dump_offset_index(path, args.index_sanity_check, args.verify_index_only)
        elif name.endswith(file_names.TIME_INDEX_SUFFIX):
            problems += dump_time_index(path, args.index_sanity_check, args.verify_index_only)
        elif name.endswith(file_names.SNAPSHOT_SUFFIX):
            problems += dump_snapshot(path)
        elif name.endswith(file_names.TXN_INDEX_SUFFIX):
            problems += dump_txn_index(path)
        else:
            print(f"Ignoring unknown file {path}")
    if problems:
        print(f"{problems} problem(s) found")
        return 2
    return 0


def _b(flag: bool) -> str:
    return "true" if flag else "false"


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="replace")


def dump_log_file(
    path: Path,
    deep: bool,
    print_data: bool,
    max_message_size: int,
    *,
    offsets_decoder: bool = False,
) -> int:
    """Print every entry; returns how many invalid ones (and invalid byte ranges) it found."""
    data = path.read_bytes()
    base = file_names.offset_from_file_name(path.name)
    print(f"Starting offset: {base}")
    position = 0
    size = len(data)
    problems = 0
    while position + MIN_ENTRY_SIZE <= size:
        try:
            header = parse_entry_header(data, position)
            if header.size_in_bytes > max_message_size:
                raise CorruptRecordError(
                    f"batch of {header.size_in_bytes} bytes exceeds --max-message-size "
                    f"{max_message_size}"
                )
            if position + header.size_in_bytes > size:
                raise CorruptRecordError(
                    f"batch claims {header.size_in_bytes} bytes, {size - position} remain"
                )
        except KafkaError as e:
            resume = _next_valid_entry(data, position + 1, max_message_size)
            if resume is None:
                break
            problems += 1
            print(
                f"Found invalid batch at position {position}: {e.message}; skipping "
                f"{resume - position} bytes to position {resume}"
            )
            position = resume
            continue
        if isinstance(header, BatchHeader):
            valid = _dump_v2(data, position, header, deep, print_data, offsets=offsets_decoder)
        else:
            valid = _dump_legacy(data, position, deep, print_data, offsets=offsets_decoder)
        problems += 0 if valid else 1
        position += header.size_in_bytes
    if position < size:
        problems += 1
        print(f"Found {size - position} invalid bytes at the end of {path.name}")
    return problems


def _next_valid_entry(data: bytes, start: int, max_size: int) -> int | None:
    """The first position from ``start`` where a whole entry with a valid checksum starts."""
    for position in range(start, len(data) - MIN_ENTRY_SIZE + 1):
        if data[position + 16] not in (0, 1, 2):
            continue
        try:
            header = parse_entry_header(data, position)
        except KafkaError:
            continue
        size = header.size_in_bytes
        fits = size <= max_size and position + size <= len(data)
        if fits and entry_crc(data, position, header) == header.crc:
            return position
    return None


def _dump_v2(
    data: bytes, position: int, header: BatchHeader, deep: bool, print_data: bool, *, offsets: bool
) -> bool:
    """Print one v2 batch (and its records); whether it is valid."""
    raw = data[position : position + header.size_in_bytes]
    valid = compute_crc(raw, 0, len(raw)) == header.crc
    ts_type = header.timestamp_type.kafka_name
    print(
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.records_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {header.last_sequence} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {_b(header.is_transactional)} isControl: {_b(header.is_control)} "
        f"position: {position} {ts_type}: {header.max_timestamp} "
        f"size: {header.size_in_bytes} magic: {header.magic} "
        f"compresscodec: {_codec_name(header.attributes)} crc: {header.crc} "
        f"isvalid: {_b(valid)}"
    )
    if valid:
        try:
            validate_batch_records(raw, 0, header, dense_offsets=False)
        except KafkaError as e:
            print(f"| invalid records: {e.message}")
            return False
    if deep and valid:
        _, records = decode_batch(raw)
        for r in records:
            line = (
                f"| offset: {r.offset} {ts_type}: {r.timestamp} "
                f"keysize: {-1 if r.key is None else len(r.key)} "
                f"valuesize: {-1 if r.value is None else len(r.value)} "
                f"sequence: {r.sequence} headerKeys: [{','.join(h.key for h in r.headers)}]"
            )
            if header.is_control:
                line += " " + _control_text(r.key, r.value)
            elif print_data:
                line += _contents(r.offset, r.key, r.value, offsets)
            print(line)
    return valid


def _codec_name(attributes: int) -> str:
    """The codec's name, or ``UNKNOWN(id)`` for ids 5-7 (a corrupt batch is still printed)."""
    try:
        return CompressionType.from_id(attributes & 0x07).kafka_name.upper()
    except KafkaError:
        return f"UNKNOWN({attributes & 0x07})"


def _dump_legacy(
    data: bytes, position: int, deep: bool, print_data: bool, *, offsets: bool
) -> bool:
    """Print one v0/v1 message (and, deep, the messages it wraps); whether it is valid."""
    size = 12 + int.from_bytes(data[position + 8 : position + 12], "big", signed=True)
    try:
        wrappers = decode_legacy(data[position : position + size], deep=False)
        messages = decode_legacy(data[position : position + size], deep=True) if deep else []
    except KafkaError as e:
        offset = int.from_bytes(data[position : position + 8], "big", signed=True)
        print(
            f"offset: {offset} position: {position} isvalid: false size: {size} "
            f"magic: {data[position + 16]} ({e.message})"
        )
        return False
    for m in wrappers:
        ts = "" if m.timestamp is None else f" {m.timestamp_type.kafka_name}: {m.timestamp}"
        print(
            f"offset: {m.offset} position: {position}{ts} isvalid: true "
            f"size: {m.size_in_bytes} magic: {m.magic} "
            f"compresscodec: {m.compression.kafka_name.upper()} crc: {m.crc}"
        )
    for m in messages:
        ts = "" if m.timestamp is None else f" {m.timestamp_type.kafka_name}: {m.timestamp}"
        line = (
            f"| offset: {m.offset}{ts} isvalid: true "
            f"keysize: {-1 if m.key is None else len(m.key)} "
            f"valuesize: {-1 if m.value is None else len(m.value)} magic: {m.magic} "
            f"crc: {m.crc}"
        )
        if print_data:
            line += _contents(m.offset, m.key, m.value, offsets)
        print(line)
    return True


def _control_text(key: bytes | None, value: bytes | None) -> str:
    """A control record as kafka-dump-log.sh prints it: ``endTxnMarker: COMMIT
    coordinatorEpoch: N`` for a transaction marker, its type otherwise."""
    try:
        marker = parse_end_transaction_marker(key, value)
    except KafkaError:
        return f"controlType: {parse_control_key(key).name}"
    kind = "COMMIT" if marker.control_type is ControlRecordType.COMMIT else "ABORT"
    return f"endTxnMarker: {kind} coordinatorEpoch: {marker.coordinator_epoch}"


def _contents(offset: int, key: bytes | None, value: bytes | None, offsets: bool) -> str:
    """`` key: … payload: …`` of one record: as text, or decoded as __consumer_offsets."""
    if offsets:
        return _offsets_contents(offset, key, value)
    shown = "" if key is None else f" key: {_text(key)}"
    return f"{shown} payload: {_text(value)}"


def _offsets_contents(offset: int, key: bytes | None, value: bytes | None) -> str:
    # Kafka 2.8 stops the whole dump at the first record it cannot decode; like Kafka 3.x, we
    # print the error in place of the key and carry on, which is what a debugging tool is for.
    try:
        if key is None:
            raise CorruptRecordError(
                "Failed to decode message using offset topic decoder (message had a missing key)"
            )
        parsed = decode_key(key)
        if isinstance(parsed, OffsetKey):
            shown = (
                f"offset_commit::group={parsed.group},partition={parsed.topic}-{parsed.partition}"
            )
            payload = "<DELETE>" if value is None else _offset_payload(value)
        else:
            shown = f"group_metadata::group={parsed.group}"
            payload = "<DELETE>" if value is None else _group_payload(value)
    except KafkaError as e:
        return f" key: Error at offset {offset}, skipping. {e.message}"
    return f" key: {shown} payload: {payload}"


def _offset_payload(value: bytes) -> str:
    committed = decode_offset_value(value)
    if committed.metadata:
        return f"offset={committed.offset},metadata={committed.metadata}"
    return f"offset={committed.offset}"


def _group_payload(value: bytes) -> str:
    """Kafka's JSON summary of a group: the consumer protocol's assignments decoded
    (``member=[t-0, t-1]``, then ``:HEX`` of any user data), other protocols' as hex."""
    group = decode_group_value(value)
    assignments: list[str] = []
    for member in group.members:
        if group.protocol_type == PROTOCOL_TYPE:
            assignment = decode_assignment(member.assignment)
            shown = f"{member.member_id}=[{', '.join(map(str, assignment.partitions))}]"
            user_data = _hex(assignment.user_data or b"")
            assignments.append(f"{shown}:{user_data}" if user_data else shown)
        else:
            assignments.append(f"{member.member_id}={_hex(member.assignment)}")
    summary = {
        "protocolType": group.protocol_type,
        "protocol": group.protocol,
        "generationId": group.generation,
        "assignment": "{" + ",".join(assignments) + "}",
    }
    return json.dumps(summary, separators=(",", ":"), ensure_ascii=False)


def _hex(data: bytes) -> str:
    # Kafka formats BigInt(1, bytes) with %X, which drops leading zero digits.
    return format(int.from_bytes(data, "big"), "X") if data else ""


def _open_index(cls: type[OffsetIndex] | type[TimeIndex], path: Path) -> Any:
    base = file_names.offset_from_file_name(path.name)
    return cls(path, base, max(path.stat().st_size, cls.entry_size), writable=False)


def dump_offset_index(path: Path, sanity_only: bool, verify_only: bool) -> int:
    """Print the entries and those that disagree with the log; returns the number of problems."""
    index: OffsetIndex = _open_index(OffsetIndex, path)
    try:
        if sanity_only:
            return _sanity(index, path)
        log_path = path.with_name(
            path.name.removesuffix(file_names.INDEX_SUFFIX) + file_names.LOG_SUFFIX
        )
        mismatches: list[tuple[int, int]] = []
        fd = os.open(log_path, os.O_RDONLY) if log_path.exists() else None
        try:
            for n in range(index.entries):
                entry = index.entry(n)
                if n > 0 and entry.offset <= index.base_offset:
                    break  # zero-filled preallocated tail
                if fd is not None:
                    raw = os.pread(fd, ENTRY_HEADER_BYTES, entry.position)
                    try:
                        header = parse_entry_header(raw)
                    except KafkaError:
                        mismatches.append((entry.offset, -1))
                    else:
                        # A v0/v1 log indexed a compressed message set by its first offset.
                        legacy = not isinstance(header, BatchHeader)
                        actual = header.last_offset
                        if actual != entry.offset and not (legacy and entry.offset < actual):
                            mismatches.append((entry.offset, actual))
                if not verify_only:
                    print(f"offset: {entry.offset} position: {entry.position}")
        finally:
            if fd is not None:
                os.close(fd)
        if mismatches:
            print(f"Mismatches in :{path}")
            for idx_off, log_off in mismatches:
                print(f"  Index offset: {idx_off}, log offset: {log_off}")
        return len(mismatches)
    finally:
        index.close_handler()


def dump_time_index(path: Path, sanity_only: bool, verify_only: bool) -> int:
    """Print the entries and those out of order; returns the number of problems."""
    index: TimeIndex = _open_index(TimeIndex, path)
    try:
        if sanity_only:
            return _sanity(index, path)
        previous = -1
        out_of_order: list[tuple[int, int]] = []
        for n in range(index.entries):
            entry = index.entry(n)
            if n > 0 and entry.timestamp == 0 and entry.offset == index.base_offset:
                break  # zero-filled preallocated tail
            if entry.timestamp <= previous:
                out_of_order.append((entry.timestamp, previous))
            previous = entry.timestamp
            if not verify_only:
                print(f"timestamp: {entry.timestamp} offset: {entry.offset}")
        if out_of_order:
            print(f"Found out of order timestamp in :{path}")
            for ts, prev in out_of_order:
                print(f"  Index timestamp: {ts}, Previously indexed timestamp: {prev}")
        return len(out_of_order)
    finally:
        index.close_handler()


def _sanity(index: OffsetIndex | TimeIndex, path: Path) -> int:
    try:
        index.sanity_check()
    except CorruptIndexError as e:
        print(f"Found invalid index file {path}: {e}")
        return 1
    print(f"{path} passed sanity check.")
    return 0


def dump_snapshot(path: Path) -> int:
    """Print the producer-state entries; a corrupt snapshot is reported (returns 1)."""
    try:
        entries = decode_snapshot(path.read_bytes())
    except KafkasimError as e:
        print(f"Found corrupt snapshot {path}: {e}")
        return 1
    for entry in entries:
        last = entry.batch_metadata[-1] if entry.batch_metadata else None
        txn = "None" if entry.current_txn_first_offset is None else entry.current_txn_first_offset
        line = (
            f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch} "
            f"coordinatorEpoch: {entry.coordinator_epoch} currentTxnFirstOffset: {txn} "
            f"lastTimestamp: {entry.last_timestamp}"
        )
        if last is not None:
            line += (
                f" firstSequence: {last.first_seq} lastSequence: {last.last_seq} "
                f"lastOffset: {last.last_offset} offsetDelta: {last.offset_delta}"
                f" timestamp: {last.timestamp}"
            )
        print(line)
    return 0


def dump_txn_index(path: Path) -> int:
    """Print each aborted transaction as kafka-dump-log.sh does; a corrupt index (torn entry,
    unknown version, entries out of order) is reported after its readable entries (returns 1)."""
    try:
        base = file_names.offset_from_file_name(path.name)
    except ValueError as e:
        print(f"Found corrupt transaction index {path}: {e}")
        return 1
    index = TransactionIndex(path, base)
    for txn in index.all_aborted_txns():
        print(
            f"version: {txn.version} producerId: {txn.producer_id} firstOffset: "
            f"{txn.first_offset} lastOffset: {txn.last_offset} "
            f"lastStableOffset: {txn.last_stable_offset}"
        )
    try:
        index.sanity_check()
    except CorruptIndexError as e:
        print(f"Found corrupt transaction index {path}: {e}")
        return 1
    return 0
