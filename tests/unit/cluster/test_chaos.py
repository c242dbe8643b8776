"""The parts of the real-process backend (``cluster.chaos``) that need no process: which faults
it refuses and why (before anything starts), the brokers' settings, and reading a replica's log
from its segment files."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kafkasim.cluster import chaos
from kafkasim.cluster.compose import compose_spec_for
from kafkasim.faults import runner
from kafkasim.faults.actions import ACTIONS
from kafkasim.faults.backend import (
    UnsupportedFaultError,
    broker_props,
    check_supported,
    unsupported_faults,
)
from kafkasim.faults.reading import catalog, find, load
from kafkasim.faults.scenario import Fault
from kafkasim.storage import file_names
from kafkasim.storage.records.batch import RecordBatchBuilder, set_base_offset
from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.records.legacy import encode_legacy
from tests.txn_records import ABORT, COMMIT, Producer

GZIP = CompressionType.GZIP

RUNNABLE = {
    "leader-crash",
    "follower-pause",
    "controller-crash",
    "rolling-restart",
    "kip101-case1",
    "txn-zombie-fenced",
}


def test_every_action_is_either_injected_or_refused_with_a_reason() -> None:
    assert chaos.INJECTABLE.isdisjoint(chaos.NOT_INJECTABLE)
    assert chaos.INJECTABLE | set(chaos.NOT_INJECTABLE) == set(ACTIONS)
    assert all(reason and "\n" not in reason for reason in chaos.NOT_INJECTABLE.values())


@pytest.mark.parametrize("name", sorted(catalog()))
def test_the_catalog_runs_or_is_refused_naming_exactly_its_faults(name: str) -> None:
    chosen = load(find(name))
    refused = {
        f.action if f.action in chaos.NOT_INJECTABLE else "crash with lose_unflushed"
        for f in chosen.faults
        if f.action in chaos.NOT_INJECTABLE or f.params.get("lose_unflushed")
    }
    assert (name in RUNNABLE) == (not refused)
    if not refused:
        check_supported(chosen, chaos.LOCAL)
        return
    with pytest.raises(UnsupportedFaultError) as caught:
        check_supported(chosen, chaos.LOCAL)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"scenario {name}: local processes")
    named = {clause.split(" (faults[")[0] for clause in unsupported_faults(chosen, chaos.LOCAL)}
    assert named == refused


def test_the_refusal_lists_each_kind_once_with_the_indexes_of_its_faults() -> None:
    base = load(find("leader-crash"))
    faults = (
        Fault(1.0, "isolate", "broker:1", 1.0),
        Fault(2.0, "crash", "broker:2", 1.0, {"lose_unflushed": False}),
        Fault(3.0, "crash", "broker:3", 1.0, {"lose_unflushed": True}),
        Fault(4.0, "isolate", "broker:2", 1.0),
        Fault(5.0, "clock_jump", "broker:1", params={"seconds": 60.0}),
    )
    clauses = unsupported_faults(replace(base, faults=faults), chaos.LOCAL)
    assert [c.split(":", 1)[0] for c in clauses] == [
        "isolate (faults[0], faults[3])",
        "crash with lose_unflushed (faults[2])",
        "clock_jump (faults[4])",
    ]
    assert "power cut" in clauses[1]


def test_run_refuses_before_starting_anything(tmp_path: Path) -> None:
    isolating = replace(load(find("leader-crash")), faults=(Fault(1.0, "split", "broker:1", 1.0),))
    with pytest.raises(UnsupportedFaultError, match=r"split \(faults\[0\]\)"):
        runner.run(isolating, chaos.LOCAL, tmp_path / "new")
    assert not (tmp_path / "new").exists()
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "broker-1").mkdir()
    with pytest.raises(chaos.ChaosError, match="not empty"):
        runner.run(load(find("leader-crash")), chaos.LOCAL, tmp_path / "used")


def test_brokers_get_the_scenarios_settings_over_the_runners_defaults() -> None:
    chosen = load(find("follower-pause"))
    props = broker_props(chosen)
    assert props["unclean.leader.election.enable"] is False
    assert props["auto.create.topics.enable"] is False
    assert props["group.initial.rebalance.delay.ms"] == 0
    assert props["zookeeper.session.timeout.ms"] == 18000
    assert props["replica.lag.time.max.ms"] == 5000
    unclean = load(find("unsafe-unclean-election"))
    assert broker_props(unclean)["unclean.leader.election.enable"] is True


# -- a replica's log on disk ---------------------------------------------------------------------


def write_segment(directory: Path, base_offset: int, batches: list[list[str]]) -> Path:
    data = bytearray()
    offset = base_offset
    for values in batches:
        builder = RecordBatchBuilder()
        for value in values:
            builder.append(0, None, value.encode())
        batch = bytearray(builder.build())
        set_base_offset(batch, 0, offset)
        offset += len(values)
        data += batch
    path = file_names.log_file(directory, base_offset)
    path.write_bytes(bytes(data))
    return path


def test_a_replica_log_is_read_segment_by_segment_in_offset_order(tmp_path: Path) -> None:
    write_segment(tmp_path, 3, [["d"], ["e", "f"]])  # written first, read second
    write_segment(tmp_path, 0, [["a", "b"], ["c"]])
    (tmp_path / "00000000000000000000.index").write_bytes(b"\0" * 16)
    (tmp_path / "00000000000000000099.log.deleted").write_bytes(b"junk")
    entries, problem = chaos.read_replica_log(tmp_path)
    assert problem is None
    assert entries == [(0, "a"), (1, "b"), (2, "c"), (3, "d"), (4, "e"), (5, "f")]


def test_a_replica_log_written_before_kafka_0_11_reads_every_format(tmp_path: Path) -> None:
    """v0 messages, a gzip v1 wrapper, then v2 batches appended by a later broker."""
    v0 = encode_legacy([(None, None, b"a")], magic=0)
    wrapper = encode_legacy(
        [(1, None, b"b"), (2, None, b"c")], magic=1, base_offset=1, compression=GZIP
    )
    path = write_segment(tmp_path, 0, [["d"], ["e"]])
    v2 = bytearray(path.read_bytes())
    set_base_offset(v2, 0, 3)
    set_base_offset(v2, len(v2) // 2, 4)
    path.write_bytes(v0 + wrapper + bytes(v2))
    entries, problem = chaos.read_replica_log(tmp_path)
    assert problem is None
    assert entries == [(0, "a"), (1, "b"), (2, "c"), (3, "d"), (4, "e")]


def test_reading_stops_at_a_batch_whose_crc_does_not_match(tmp_path: Path) -> None:
    path = write_segment(tmp_path, 0, [["a"], ["b"], ["c"]])
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # the last record's value: only the CRC can tell
    path.write_bytes(bytes(data))
    entries, problem = chaos.read_replica_log(tmp_path)
    assert entries == [(0, "a"), (1, "b")]
    assert problem is not None and str(path) in problem and "CRC" in problem


def test_a_zero_filled_tail_ends_a_segment_quietly(tmp_path: Path) -> None:
    path = write_segment(tmp_path, 0, [["a", "b"]])
    path.write_bytes(path.read_bytes() + b"\0" * 512)  # a preallocated segment's unused end
    assert chaos.read_replica_log(tmp_path) == ([(0, "a"), (1, "b")], None)


def test_transaction_markers_are_not_data_and_are_read_apart(tmp_path: Path) -> None:
    producer = Producer(7)
    data = (
        producer.batch(2, base_offset=0)
        + producer.marker(COMMIT, base_offset=2)
        + producer.batch(1, base_offset=3)
        + producer.marker(ABORT, base_offset=4)
    )
    file_names.log_file(tmp_path, 0).write_bytes(data)
    markers: list[tuple[int, str]] = []
    entries, problem = chaos.read_replica_log(tmp_path, markers)
    assert problem is None
    assert entries == [(0, "p7-0"), (1, "p7-1"), (3, "p7-2")]
    assert markers == [(2, "COMMIT"), (4, "ABORT")]
    assert chaos.read_replica_log(tmp_path)[0] == entries  # without a list: still not data


# The compose backend without root on the host (as root it cuts links one way too).
NO_ROOT = "network namespaces need root, and this process runs as uid 1000"


@pytest.mark.parametrize(
    ("action", "params", "why"),
    [
        ("partition_one_way", {"inbound": True}, "one-way faults need network namespaces"),
        ("slow_one_way", {"latency_ms": 100.0}, "needs network namespaces and tc netem"),
        ("clock_drift", {"rate": 2.0}, "needs libfaketime"),
        ("torn_write", {}, "needs a power cut"),
        ("slow_disk", {"write_latency_ms": 50.0}, "needs device-mapper's dm-delay"),
    ],
)
def test_the_new_fault_kinds_are_refused_on_processes_and_containers_in_one_line(
    action: str, params: dict[str, object], why: str
) -> None:
    chosen = replace(
        load(find("leader-crash")), faults=(Fault(1.0, action, "broker:1", 1.0, params),)
    )
    with pytest.raises(UnsupportedFaultError) as caught:
        check_supported(chosen, chaos.LOCAL)
    message = str(caught.value)
    assert "\n" not in message and f"{action} (faults[0]): " in message and why in message
    with pytest.raises(
        UnsupportedFaultError, match=rf"the compose cluster cannot inject {action} "
    ):
        check_supported(chosen, compose_spec_for(NO_ROOT, "delaying needs tc netem"))
