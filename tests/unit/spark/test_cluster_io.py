"""The Spark reader's decoding of one fetch: the records of ``[position, until)``, whatever
the message format of the entries holding them (no Spark needed)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import cast

import pytest
from tenacity import AsyncRetrying, stop_after_attempt

from kafkasim.client.network import NetworkClient
from kafkasim.common.clock import ManualClock
from kafkasim.common.types import TopicPartition
from kafkasim.proto import kafkasim_pb2 as pb
from kafkasim.spark.cluster_io import (
    ClusterConnection,
    IdleConnections,
    decode_columns,
    read_range,
)
from kafkasim.spark.options import ReadSettings
from kafkasim.spark.planning import OffsetRange
from kafkasim.storage.records.batch import TimestampType, encode_batch
from kafkasim.storage.records.compression import CompressionType
from kafkasim.storage.records.legacy import encode_legacy

T0 = 1_700_000_000_000


def _fetched() -> bytes:
    """0-2: a v0 gzip wrapper, 3-5: a v1 gzip wrapper, 6-8: a v2 batch with headers."""
    return b"".join(
        [
            encode_legacy(
                [(None, b"k%d" % o, b"v%d" % o) for o in range(3)],
                magic=0,
                compression=CompressionType.GZIP,
            ),
            encode_legacy(
                [(T0 + o, b"k%d" % o, b"v%d" % o) for o in range(3, 6)],
                magic=1,
                base_offset=3,
                compression=CompressionType.GZIP,
            ),
            encode_batch(
                [(T0 + o, b"k%d" % o, b"v%d" % o, (("h", b"x"),)) for o in range(6, 9)],
                base_offset=6,
            ),
        ]
    )


@pytest.mark.parametrize(
    ("position", "until", "next_position"),
    [(0, 9, 9), (1, 5, 5), (4, 8, 8), (2, 3, 3), (7, 100, 9)],
)
def test_a_range_inside_wrappers_and_batches_reads_exactly_its_records(
    position: int, until: int, next_position: int
) -> None:
    chunk, after = decode_columns(TopicPartition("t", 0), _fetched(), position, until)
    assert after == next_position
    wanted = range(position, min(until, 9))
    assert chunk.offsets == list(wanted)
    assert chunk.values == [b"v%d" % o for o in wanted]
    assert chunk.keys == [b"k%d" % o for o in wanted]
    assert chunk.timestamps == [-1 if o < 3 else T0 + o for o in wanted]
    assert chunk.timestamp_types == [
        int(TimestampType.NO_TIMESTAMP_TYPE if o < 3 else TimestampType.CREATE_TIME) for o in wanted
    ]
    assert chunk.headers == [(("h", b"x"),) if o >= 6 else () for o in wanted]


class _FakeLeader:
    """A partition leader answering each fetch with the one batch at its offset (three
    records a batch), logging fetches next to the reader's decoding."""

    def __init__(self, log: list[tuple[str, int]], batches: int) -> None:
        self.log = log
        self.batches = {
            3 * b: encode_batch([(T0, None, b"v%d" % o) for o in range(3 * b, 3 * b + 3)],
                                base_offset=3 * b)
            for b in range(batches)
        }  # fmt: skip
        self.end = 3 * batches
        self.open = 0  # fetches started and not answered

    def retrying(self, *, retry_on: object) -> AsyncRetrying:
        return AsyncRetrying(stop=stop_after_attempt(1), reraise=True)

    async def fetch_raw(self, tp: TopicPartition, position: int, **_: object) -> object:
        self.log.append(("fetch", position))
        self.open += 1
        try:
            await asyncio.sleep(0.01)
        finally:
            self.open -= 1
        return pb.FetchPartitionResponse(
            records=self.batches[position], high_watermark=self.end, last_stable_offset=self.end
        )


def _read(leader: _FakeLeader, until: int, log: list[tuple[str, int]]) -> AsyncIterator[object]:
    settings = ReadSettings(("x:1",), include_headers=False, fail_on_data_loss=True, arrow=False)

    def decode(data: bytes, position: int, until: int, aborted: object) -> tuple[object, int]:
        log.append(("decode", position))
        return decode_columns(TopicPartition("t", 0), data, position, until)

    client = cast(NetworkClient, leader)
    return read_range(client, OffsetRange("t", 0, 0, until), settings, decode)


def test_the_next_fetch_is_sent_before_a_fetch_is_decoded() -> None:
    log: list[tuple[str, int]] = []
    leader = _FakeLeader(log, 3)

    async def main() -> list[int]:
        return [o for chunk in [c async for c in _read(leader, 9, log)] for o in chunk.offsets]  # type: ignore[attr-defined]

    assert asyncio.run(main()) == list(range(9))
    assert log == [
        ("fetch", 0), ("fetch", 3), ("decode", 0), ("fetch", 6), ("decode", 3), ("decode", 6)
    ]  # fmt: skip


def test_a_read_closed_early_cancels_its_fetch_ahead() -> None:
    log: list[tuple[str, int]] = []
    leader = _FakeLeader(log, 3)

    async def main() -> None:
        chunks = _read(leader, 9, log)
        await anext(chunks)
        assert leader.open == 1  # the fetch at offset 3
        await chunks.aclose()  # type: ignore[attr-defined]
        await asyncio.sleep(0)
        assert leader.open == 0

    asyncio.run(main())


class _CountedAnswer:
    """A fetch answer counting reads of its ``records``: each read of a protobuf bytes field
    copies the whole field (4 MiB a fetch)."""

    def __init__(self, part: pb.FetchPartitionResponse, reads: list[int]) -> None:
        self._part = part
        self._reads = reads
        self.high_watermark = part.high_watermark
        self.last_stable_offset = part.last_stable_offset
        self.aborted_transactions = part.aborted_transactions

    @property
    def records(self) -> bytes:
        self._reads.append(1)
        return self._part.records


def test_each_fetched_answer_has_its_records_read_out_once() -> None:
    log: list[tuple[str, int]] = []
    reads: list[int] = []
    leader = _FakeLeader(log, 3)
    plain_fetch = leader.fetch_raw

    async def counted_fetch(tp: TopicPartition, position: int, **kw: object) -> object:
        part = await plain_fetch(tp, position, **kw)
        assert isinstance(part, pb.FetchPartitionResponse)
        return _CountedAnswer(part, reads)

    leader.fetch_raw = counted_fetch  # type: ignore[method-assign]

    async def main() -> list[int]:
        return [o for chunk in [c async for c in _read(leader, 9, log)] for o in chunk.offsets]  # type: ignore[attr-defined]

    assert asyncio.run(main()) == list(range(9))
    assert len(reads) == 3  # three fetches


def _settings(server: str = "127.0.0.1:1", request_timeout_ms: int = 30_000) -> ReadSettings:
    return ReadSettings(
        (server,),
        include_headers=False,
        fail_on_data_loss=True,
        arrow=True,
        request_timeout_ms=request_timeout_ms,
    )


def _closed(conn: ClusterConnection) -> bool:
    return conn.closed


def test_a_read_connection_is_kept_for_the_next_read_with_the_same_settings() -> None:
    pool = IdleConnections()
    try:
        with pool.connection(_settings()) as first:
            first.run(asyncio.sleep(0))
        with pool.connection(_settings()) as again:
            assert again is first  # its loop, channels and metadata kept
            with pool.connection(_settings()) as meanwhile:
                assert meanwhile is not first  # the idle one is in use
        # One idle connection a settings: the one given back second is closed.
        assert _closed(first) and not _closed(meanwhile)
        with pool.connection(_settings("127.0.0.1:2")) as other_cluster:
            assert other_cluster is not meanwhile
        with pool.connection(_settings(request_timeout_ms=5_000)) as other_timeouts:
            assert other_timeouts is not meanwhile
        with pool.connection(_settings()) as same:
            assert same is meanwhile
    finally:
        pool.close()
    assert _closed(meanwhile) and _closed(other_cluster) and _closed(other_timeouts)


def test_a_read_that_fails_closes_its_connection() -> None:
    pool = IdleConnections()
    try:
        with pytest.raises(RuntimeError), pool.connection(_settings()) as failed:
            raise RuntimeError("the read failed")
        assert _closed(failed)
        with pool.connection(_settings()) as fresh:
            assert fresh is not failed
    finally:
        pool.close()


def test_a_read_stopped_early_closes_its_connection() -> None:
    pool = IdleConnections()

    def rows() -> Iterator[ClusterConnection]:
        with pool.connection(_settings()) as conn:
            yield conn
            yield conn

    reading = rows()
    conn = next(reading)
    reading.close()  # Spark stops reading (a limit was reached)
    assert _closed(conn)
    pool.close()


def test_a_connection_idle_past_the_timeout_is_closed_not_used() -> None:
    clock = ManualClock()
    pool = IdleConnections(timeout_ms=300_000, clock=clock)
    try:
        with pool.connection(_settings()) as first:
            pass
        clock.advance(299_999)
        with pool.connection(_settings()) as again:
            assert again is first
        clock.advance(300_000)
        with pool.connection(_settings()) as later:
            assert later is not first
        assert _closed(first)
    finally:
        pool.close()
