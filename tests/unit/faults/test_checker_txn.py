"""The history checker's transaction rules (faults/transactions.py) on hand-made histories: clean
interleavings of committed and aborted transactions are SAFE, and each history that mimics one
way a broker can break read_committed (the last stable offset running ahead, the aborted
transactions list skipped, a commit made visible on one partition only, group offsets committed
without their writes) is caught and named — the transaction scenarios' verdicts rest on these."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.faults.checker import CheckReport, check
from kafkasim.faults.history import (
    ABORT,
    COMMIT,
    FETCH_OFFSETS,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    SEND_OFFSETS,
    History,
    Op,
    OpType,
)
from kafkasim.faults.report import render
from tests.cli_run import kafkasim

T = "out"
GROUP, IN = "g", "in"


@dataclass
class Run:
    """A hand-made transactional run: ``send`` appends to the partitions' logs as a broker
    would (offsets dense, markers taking an offset each), ``end`` records the outcome and
    writes the markers, ``history()`` closes it with every replica holding the same log."""

    h: History = field(default_factory=History)
    logs: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    markers: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    ends: dict[int, int] = field(default_factory=dict)  # partition -> log end offset
    open: dict[str, set[int]] = field(default_factory=dict)  # txn -> partitions written
    fates: dict[str, str] = field(default_factory=dict)  # txn -> the marker written for it

    def send(self, txn: str, value: str, t: int, *, partition: int = 0,
             outcome: OpType = OpType.OK, written: bool = True) -> int:  # fmt: skip
        """One transactional send; the offset it got (-1: not written)."""
        process = txn.split(":", maxsplit=1)[0]
        invoke = Op(OpType.INVOKE, "send", process, t, T, partition, value, idempotent=True)
        invoke = replace(invoke, txn=txn)
        offset = -1
        if written:
            offset = self.ends.get(partition, 0)
            self.ends[partition] = offset + 1
            self.logs.setdefault(partition, []).append((offset, value))
            self.open.setdefault(txn, set()).add(partition)
        done = replace(invoke, type=outcome, time_ms=t + 1)
        if outcome is OpType.OK:
            done = replace(done, offset=offset)
        elif outcome is OpType.FAIL:
            done = replace(done, error="INVALID_RECORD")
        else:
            done = replace(done, error="REQUEST_TIMED_OUT")
        self.h.ops.extend([invoke, done])
        return offset

    def end(self, txn: str, t: int, *, f: str = COMMIT, outcome: OpType = OpType.OK,
            marker: str | None = None, invoke: bool = True) -> None:  # fmt: skip
        """The producer's commit or abort; ``marker`` the marker written (default: what the
        outcome says; "" none)."""
        process = txn.split(":", maxsplit=1)[0]
        if invoke:
            self.h.ops.append(Op.end(OpType.INVOKE, f, process, time_ms=t, txn=txn))
        if outcome is not OpType.INVOKE:
            error = {OpType.OK: None, OpType.FAIL: "PRODUCER_FENCED"}.get(outcome, "TIMED_OUT")
            self.h.ops.append(Op.end(outcome, f, process, time_ms=t + 1, txn=txn, error=error))
        if marker is None:
            marker = "COMMIT" if f == COMMIT and outcome is OpType.OK else "ABORT"
        if marker:
            self.write_markers(txn, marker)

    def write_markers(self, txn: str, marker: str) -> None:
        self.fates[txn] = marker
        for partition in sorted(self.open.pop(txn, set())):
            offset = self.ends.get(partition, 0)
            self.ends[partition] = offset + 1
            self.markers.setdefault(partition, []).append((offset, marker))

    def offsets(self, txn: str, offset: int, t: int, *, partition: int = 0) -> None:
        """send_offsets_to_transaction: group ``g`` at ``offset`` of in-``partition``."""
        process = txn.split(":", maxsplit=1)[0]
        op = Op(OpType.OK, SEND_OFFSETS, process, t, IN, partition, "", offset=offset,
                group=GROUP, txn=txn)  # fmt: skip
        self.h.ops.append(op)

    def read(self, value: str, offset: int, t: int, *, process: str = "consumer-1",
             partition: int = 0, isolation: str = READ_COMMITTED) -> None:  # fmt: skip
        op = Op(OpType.OK, "read", process, t, T, partition, value, offset=offset)
        self.h.ops.append(replace(op, hw=self.ends[partition], isolation=isolation))

    def read_all_committed(self, t: int, process: str = "consumer-1") -> None:
        """What a correct read_committed consumer reads at ``t``: every record of every
        transaction committed by then, in offset order, per partition."""
        committed = {op.txn for op in self.h.ops if op.f == COMMIT and op.type is OpType.OK}
        for partition in sorted(self.logs):
            for offset, value in self.logs[partition]:
                if self.txn_of(value, partition) in committed:
                    self.read(value, offset, t + offset, process=process, partition=partition)

    def txn_of(self, value: str, partition: int) -> str | None:
        return next(op.txn for op in self.h.ops if op.value == value and op.partition == partition)

    def history(self) -> History:
        for partition, entries in self.logs.items():
            for broker in (1, 2, 3):
                self.h.final_logs[(T, partition, broker)] = list(entries)
                if partition in self.markers:
                    self.h.final_markers[(T, partition, broker)] = list(self.markers[partition])
            self.h.final_hw[(T, partition)] = self.ends[partition]
        return self.h


def interleaved() -> Run:
    """Two producers, interleaved: tx-a:0 commits a0 a1, tx-b:0 aborts b0, tx-a:1 commits a2
    (and group offset 2), tx-b:1 commits b1 (offset 3); a read_committed consumer reads what
    was committed after each commit, a read_uncommitted one reads everything."""
    run = Run()
    run.send("tx-a:0", "a0", 0)
    run.send("tx-b:0", "b0", 2)
    run.send("tx-a:0", "a1", 4)
    run.offsets("tx-a:0", 1, 5)
    run.end("tx-a:0", 10)
    run.end("tx-b:0", 12, f=ABORT)
    run.send("tx-a:1", "a2", 20)
    run.offsets("tx-a:1", 2, 21)
    run.send("tx-b:1", "b1", 22)
    run.offsets("tx-b:1", 3, 23)
    run.end("tx-a:1", 30)
    run.end("tx-b:1", 32)
    run.read_all_committed(100)
    for offset, value in run.logs[0]:
        run.read(value, offset, 200 + offset, process="consumer-2", isolation=READ_UNCOMMITTED)
    run.h.final_group_offsets[(GROUP, IN, 0)] = 3
    return run


def kinds(report: CheckReport) -> set[str]:
    counts = {k: v for k, v in report.counts().items() if k not in ("acknowledged", "read")}
    return {k for k, v in counts.items() if v}


# -- clean histories ------------------------------------------------------------------------------


def test_interleaved_committed_and_aborted_transactions_are_safe() -> None:
    report = check(interleaved().history())
    assert report.ok and report.verdict == "SAFE", report.verdict_lines()
    assert report.acknowledged == 4  # a0 a1 a2 b1: b0 was aborted
    lines = report.verdict_lines()
    assert lines[0] == (
        "VERDICT: SAFE — 4 acknowledged, 5 read back, 0 lost, 0 duplicated, 0 unexpected, "
        "0 reordered, 0 invariant violations"
    )
    assert "transactions: ok — 4 transactions, 3 committed, 1 aborted, 0 of unknown outcome" in (
        lines
    )


def test_read_uncommitted_consumers_may_read_aborted_and_open_transactions() -> None:
    """read_uncommitted is judged by the rules of before: aborted data is no anomaly."""
    run = interleaved()
    run.send("tx-b:2", "open", 40)
    run.read("b0", 1, 50, process="consumer-3", isolation=READ_UNCOMMITTED)
    run.read("open", 9, 51, process="consumer-3", isolation=READ_UNCOMMITTED)
    assert check(run.history()).ok


def test_a_read_after_the_commit_was_invoked_but_before_its_ok_is_legitimate() -> None:
    """Kafka's coordinator answers EndTxn only after PrepareCommit is logged and writes the
    markers after that: a consumer may see the records before the producer hears ok."""
    run = Run()
    run.send("tx-a:0", "a0", 0)
    run.h.ops.append(Op.end(OpType.INVOKE, COMMIT, "tx-a", time_ms=10, txn="tx-a:0"))
    run.write_markers("tx-a:0", "COMMIT")
    run.read("a0", 0, 12)
    run.h.ops.append(Op.end(OpType.OK, COMMIT, "tx-a", time_ms=15, txn="tx-a:0"))
    assert check(run.history()).ok


def test_a_value_sent_again_after_an_abort_is_no_duplicate() -> None:
    """A consume-transform-produce loop re-sends its output after an abort: the aborted copy
    stays in the log, the committed one is the value's only copy."""
    run = Run()
    run.send("tx-a:0", "x", 0)
    run.end("tx-a:0", 5, f=ABORT)
    run.send("tx-a:1", "x", 10)
    run.end("tx-a:1", 15)
    run.read("x", 2, 20)
    report = check(run.history())
    assert report.ok and report.duplicated == 0, report.verdict_lines()


def test_a_transactional_value_sent_again_follows_its_committed_copys_order() -> None:
    run = Run()
    run.send("tx-a:0", "a", 0)
    run.send("tx-a:0", "b", 1)
    run.end("tx-a:0", 5, f=ABORT)
    run.send("tx-a:1", "c", 10)
    run.end("tx-a:1", 15)
    run.send("tx-a:2", "a", 20)
    run.send("tx-a:2", "b", 21)
    run.end("tx-a:2", 25)
    run.read_all_committed(100)
    report = check(run.history())
    assert report.reordered == 0 and report.ok, report.verdict_lines()


# -- aborted reads (G1a): the aborted-transactions list skipped -----------------------------------


@pytest.mark.parametrize(
    ("f", "outcome", "how"),
    [
        (ABORT, OpType.OK, "abort ok at 13 ms"),
        (COMMIT, OpType.FAIL, "commit failed at 13 ms: PRODUCER_FENCED"),
    ],
    ids=["abort-ok", "commit-failed"],
)
def test_a_read_committed_read_of_an_aborted_transaction_is_an_aborted_read(
    f: str, outcome: OpType, how: str
) -> None:
    run = interleaved()
    run.h.ops = [op for op in run.h.ops if op.txn != "tx-b:0" or op.f == "send"]
    run.end("tx-b:0", 12, f=f, outcome=outcome, marker="")
    run.read("b0", 1, 60, process="consumer-9")  # the consumer kept what it should drop
    report = check(run.history())
    assert kinds(report) == {"aborted_reads"}
    [g1a] = report.transactions.aborted_reads
    assert (g1a.txn, g1a.process, g1a.offset, g1a.value) == ("tx-b:0", "consumer-9", 1, "b0")
    assert report.verdict == "ANOMALIES" and not report.ok
    text = "\n".join(report.verdict_lines())
    assert "1 aborted reads" in report.verdict_lines()[0]
    assert (
        f"consumer-9 (read_committed) read 'b0' at out-0 offset 1 at 60 ms; its transaction "
        f"tx-b:0 aborted ({how})"
    ) in text


# -- intermediate reads (G1b): the last stable offset ran ahead -----------------------------------


def test_a_read_committed_read_before_the_commit_was_invoked_is_an_intermediate_read() -> None:
    run = Run()
    run.send("tx-a:0", "a0", 0)
    run.read("a0", 0, 3)  # the LSO ran past the open transaction
    run.send("tx-a:0", "a1", 4)
    run.end("tx-a:0", 10)
    run.read("a1", 1, 20)
    report = check(run.history())
    assert kinds(report) == {"intermediate_reads"}
    [g1b] = report.transactions.intermediate_reads
    assert (g1b.txn, g1b.process, g1b.offset, g1b.commit_invoked_ms) == (
        "tx-a:0",
        "consumer-1",
        0,
        10,
    )
    assert "transaction tx-a:0 invoked its commit only at 10 ms" in "\n".join(
        report.verdict_lines()
    )


def test_a_read_committed_read_of_a_transaction_never_ended_is_an_intermediate_read() -> None:
    """The producer died mid-transaction; the coordinator aborts it on timeout, unseen."""
    run = interleaved()
    run.send("tx-c:0", "c0", 40)
    run.read("c0", 9, 45, process="consumer-4")
    report = check(run.history())
    assert kinds(report) == {"intermediate_reads"}
    assert report.transactions.unknown == 1
    assert "transaction tx-c:0 never invoked its commit" in "\n".join(report.verdict_lines())


def test_each_read_is_reported_once_however_often_it_is_repeated() -> None:
    run = Run()
    run.send("tx-a:0", "a0", 0)
    run.read("a0", 0, 3)
    run.read("a0", 0, 4)
    run.end("tx-a:0", 10)
    assert len(check(run.history()).transactions.intermediate_reads) == 1


# -- a committed transaction partly visible ------------------------------------------------------


def test_a_consumer_reading_past_a_committed_transaction_must_see_all_of_it() -> None:
    run = Run()
    for i in range(3):
        run.send("tx-a:0", f"a{i}", i)
    run.end("tx-a:0", 10)
    run.send("tx-a:1", "after", 20)
    run.end("tx-a:1", 25)
    run.read("a0", 0, 30)
    run.read("a2", 2, 31)  # a1 was dropped: the aborted list named a committed transaction
    run.read("after", 4, 32)
    report = check(run.history())
    assert kinds(report) == {"partial_transactions"}
    [partial] = report.transactions.partial
    assert (partial.txn, partial.process, partial.seen, partial.records) == (
        "tx-a:0",
        "consumer-1",
        2,
        3,
    )
    assert partial.missing == ((1, "a1"),)
    assert (
        "consumer-1 (read_committed) read out-0 up to offset 4 but only 2 of the 3 records "
        "committed there by tx-a:0; missing 'a1' at 1"
    ) in "\n".join(report.verdict_lines())


def test_a_transaction_visible_on_one_partition_only_is_partly_visible() -> None:
    run = Run()
    run.send("tx-a:0", "x", 0, partition=0)
    run.send("tx-a:0", "y", 1, partition=1)
    run.end("tx-a:0", 10)
    run.send("tx-b:0", "z", 11, partition=1)
    run.end("tx-b:0", 15)
    run.read("x", 0, 20)
    run.read("z", 2, 21, partition=1)  # past y, which it never saw
    report = check(run.history())
    [partial] = report.transactions.partial
    assert (partial.partition, partial.missing) == (1, ((0, "y"),))


def test_a_consumer_resuming_a_partition_past_a_transaction_is_held_from_there_on() -> None:
    """txn-leader-crash seed 5: a consume-transform-produce loop commits each partition's
    position on its own, so its restart (``t1#1``) resumed events-1 past p1:237's records there
    while it read p1:237's records on events-0. Where a process fetched its group's offset for
    a partition, it owes T's records there from that offset on, not before."""

    def resumed_at(offset: int) -> CheckReport:
        run = Run()
        run.send("tx-a:0", "x", 0, partition=0)
        run.send("tx-a:0", "y", 1, partition=1)  # offset 0 of partition 1
        run.end("tx-a:0", 10)
        run.send("tx-b:0", "z", 11, partition=1)
        run.end("tx-b:0", 15)
        fetched = Op(OpType.OK, FETCH_OFFSETS, "consumer-1", 19, T, 1, "", offset=offset,
                     group=GROUP)  # fmt: skip
        run.h.ops.append(fetched)
        run.read("x", 0, 20)
        run.read("z", 2, 21, partition=1)
        return check(run.history())

    assert resumed_at(1).ok  # past y: it never owed y
    [partial] = resumed_at(0).transactions.partial  # at y: it owed y and skipped it
    assert (partial.partition, partial.missing) == (1, ((0, "y"),))


def test_a_consumer_spanning_a_committed_transaction_without_seeing_it_is_caught() -> None:
    run = Run()
    run.send("tx-b:0", "before", 0)
    run.end("tx-b:0", 2)
    run.send("tx-a:0", "a0", 5)
    run.end("tx-a:0", 10)
    run.send("tx-b:1", "after", 11)
    run.end("tx-b:1", 15)
    run.read("before", 0, 20)
    run.read("after", 4, 21)
    [partial] = check(run.history()).transactions.partial
    assert (partial.txn, partial.seen) == ("tx-a:0", 0)


def test_a_consumer_that_started_past_a_transaction_is_not_held_to_it() -> None:
    run = Run()
    run.send("tx-a:0", "a0", 0)
    run.end("tx-a:0", 10)
    run.send("tx-b:0", "after", 11)
    run.end("tx-b:0", 15)
    run.read("after", 2, 21, process="late-consumer")
    assert check(run.history()).ok


def test_an_unknown_commit_shown_by_a_read_is_held_to_atomicity() -> None:
    """A commit that timed out, yet a consumer saw one of its records after the commit was
    invoked: it committed, so its other record must be visible too."""
    run = Run()
    run.send("tx-a:0", "a0", 0)
    run.send("tx-a:0", "a1", 1)
    run.end("tx-a:0", 10, outcome=OpType.INFO, marker="COMMIT")
    run.send("tx-b:0", "after", 11)
    run.end("tx-b:0", 15)
    run.read("a0", 0, 20)
    run.read("after", 3, 21)
    report = check(run.history())
    assert kinds(report) == {"partial_transactions"}
    assert report.acknowledged == 1  # only tx-b:0's commit returned ok


# -- offsets committed without their writes, and back ---------------------------------------------


def test_offsets_of_an_aborted_transaction_visible_to_a_resuming_consumer() -> None:
    run = interleaved()
    run.offsets("tx-b:0", 9, 11)
    run.h.ops.append(Op(OpType.OK, FETCH_OFFSETS, "consumer-5", 50, IN, 0, "", offset=9,
                        group=GROUP))  # fmt: skip
    report = check(run.history())
    assert kinds(report) == {"offsets_without_writes"}
    [found] = report.transactions.offsets_without_writes
    assert (found.txn, found.observer, found.outcome, found.offset) == (
        "tx-b:0",
        "consumer-5",
        "aborted",
        9,
    )
    assert report.verdict == "DATA LOST"
    assert (
        "group g offset 9 for in-0 committed by tx-b:0 (aborted) was visible to consumer-5, "
        "but the transaction aborted"
    ) in "\n".join(report.verdict_lines())


def test_offsets_read_back_while_a_committed_transactions_write_is_missing() -> None:
    run = interleaved()
    run.logs[0] = [(o, v) for o, v in run.logs[0] if v != "b1"]  # gone from every replica
    report = check(run.history())
    assert {"lost", "offsets_without_writes"} <= kinds(report)
    [found] = report.transactions.offsets_without_writes
    assert (found.txn, found.observer, found.missing) == (
        "tx-b:1",
        "final read-back",
        ((T, 0, "b1"),),
    )
    assert report.verdict == "DATA LOST"


def test_visible_offsets_of_an_unknown_commit_demand_its_writes() -> None:
    """The commit timed out, so its writes were never acknowledged (not "lost"), but its
    offsets became visible: it committed, and its missing write is reported."""
    run = Run()
    run.send("tx-a:0", "a0", 0, outcome=OpType.INFO, written=False)
    run.offsets("tx-a:0", 5, 2)
    run.end("tx-a:0", 10, outcome=OpType.INFO, marker="")
    run.send("tx-b:0", "b0", 11)
    run.end("tx-b:0", 15)
    run.h.final_group_offsets[(GROUP, IN, 0)] = 5
    report = check(run.history())
    assert report.lost == 0
    [found] = report.transactions.offsets_without_writes
    assert (found.outcome, found.missing) == ("unknown", ((T, 0, "a0"),))


def test_committed_writes_whose_offsets_are_missing_at_the_end_are_reported() -> None:
    run = interleaved()
    run.h.final_group_offsets[(GROUP, IN, 0)] = 2  # tx-b:1 committed 3
    report = check(run.history())
    assert kinds(report) == {"writes_without_offsets"}
    [found] = report.transactions.writes_without_offsets
    assert (found.txn, found.offset, found.final_offset) == ("tx-b:1", 3, 2)
    assert report.verdict == "ANOMALIES"


def test_without_a_final_read_back_of_the_group_offsets_are_not_judged_at_the_end() -> None:
    run = interleaved()
    run.h.final_group_offsets.clear()
    assert check(run.history()).ok


# -- acknowledgement and loss of transactional sends ----------------------------------------------


def test_a_transactional_send_counts_as_acknowledged_only_when_its_commit_is_ok() -> None:
    run = Run()
    run.send("tx-a:0", "sent-ok-commit-unknown", 0)
    run.end("tx-a:0", 5, outcome=OpType.INFO, marker="ABORT")
    run.send("tx-a:1", "sent-ok-aborted", 10)
    run.end("tx-a:1", 15, f=ABORT)
    run.send("tx-a:2", "committed", 20)
    run.end("tx-a:2", 25)
    h = run.history()
    for broker in (1, 2, 3):  # none of them left in the log: only 'committed' is lost
        h.final_logs[(T, 0, broker)] = []
    report = check(h)
    assert report.acknowledged == 1
    assert [x.value for x in report.partitions[(T, 0)].lost] == ["committed"]


def test_a_committed_send_whose_own_outcome_was_unknown_is_acknowledged_by_the_commit() -> None:
    run = Run()
    run.send("tx-a:0", "a0", 0, outcome=OpType.INFO, written=False)
    run.end("tx-a:0", 5)
    report = check(run.history())
    [lost] = report.partitions[(T, 0)].lost
    assert (lost.value, lost.offset, lost.time_ms) == ("a0", None, 6)


def test_an_aborted_copy_in_the_log_does_not_hide_a_lost_committed_copy() -> None:
    run = Run()
    run.send("tx-a:0", "x", 0)  # offset 0, aborted
    run.end("tx-a:0", 5, f=ABORT)  # marker at 1
    run.send("tx-a:1", "x", 10)  # offset 2, committed ...
    run.end("tx-a:1", 15)
    h = run.history()
    h.final_hw[(T, 0)] = 2  # ... but below the final HW only the aborted copy remains
    report = check(h)
    assert [x.value for x in report.partitions[(T, 0)].lost] == ["x"]


# -- exactly-once duplicates ----------------------------------------------------------------------


def test_a_value_committed_by_two_transactions_is_an_exactly_once_duplicate() -> None:
    """A zombie producer not fenced: the old and the new instance both commit the output."""
    run = Run()
    run.send("tx-a:0", "x", 0)
    run.send("tx-a:1", "x", 1)
    run.end("tx-a:0", 5)
    run.end("tx-a:1", 6)
    run.read_all_committed(20)
    report = check(run.history())
    [dup] = report.transactions.duplicates
    assert (dup.process, dup.value, dup.offsets, dup.txns) == (
        "consumer-1",
        "x",
        (0, 1),
        ("tx-a:0", "tx-a:1"),
    )
    assert "exactly_once_duplicates" in kinds(report) and not report.ok
    assert "consumer-1 (read_committed) read 'x' at out-0 offsets [0, 1] (transactions " in (
        "\n".join(report.verdict_lines())
    )


def test_a_record_read_twice_at_one_offset_is_no_duplicate() -> None:
    run = interleaved()
    run.read("a0", 0, 500)  # a consumer restarting re-reads a record: not a second copy
    assert check(run.history()).ok


# -- the model: markers, round trip, reports ------------------------------------------------------


def test_markers_fill_their_offsets_in_a_replica_log() -> None:
    h = interleaved().history()
    assert check(h).invariant_violations == []
    h.final_markers.clear()
    details = [v.detail for v in check(h).invariant_violations]
    assert details and all("gap" in d for d in details)


def test_a_transactional_history_survives_write_and_read(tmp_path: Path) -> None:
    h = interleaved().history()
    h.ops.append(Op(OpType.OK, FETCH_OFFSETS, "consumer-5", 50, IN, 0, "", offset=3,
                    group=GROUP))  # fmt: skip
    path = tmp_path / "txn.jsonl"
    h.write(path)
    back = History.read(path)
    assert back == h
    assert check(back).to_dict() == check(h).to_dict()
    text = path.read_text()
    assert '"kind": "markers"' in text and '"kind": "group_offset"' in text


def test_old_histories_read_and_write_as_before() -> None:
    """No transaction field is written unless set: an old line reads back to the same line."""
    line = (
        '{"acks": "all", "error": null, "f": "send", "hw": null, "idempotent": true, '
        '"kind": "op", "offset": 3, "partition": 0, "process": "producer-1", "time_ms": 7, '
        '"topic": "t", "type": "ok", "value": "v"}'
    )
    h = History.parse([line])
    assert h.ops[0].txn is None and h.ops[0].isolation is None and not h.ops[0].read_committed
    assert list(h.lines())[1] == line


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            '{"kind": "op", "type": "ok", "f": "read", "process": "c", "time_ms": 0, '
            '"topic": "t", "partition": 0, "value": "v", "isolation": "serializable"}',
            "isolation 'serializable' is none of",
        ),
        (
            '{"kind": "op", "type": "ok", "f": "commit", "process": "p", "time_ms": 0, '
            '"topic": "", "partition": -1, "value": ""}',
            "a commit op names no transaction",
        ),
        (
            '{"kind": "op", "type": "ok", "f": "send_offsets", "process": "p", "time_ms": 0, '
            '"topic": "in", "partition": 0, "value": "", "txn": "p:0"}',
            "a send_offsets op needs a group and an offset",  # it names its txn
        ),
        (
            '{"kind": "markers", "topic": "t", "partition": 0, "broker": 1, '
            '"markers": [[3, "PREPARE"]]}',
            "marker type 'PREPARE' is none of",
        ),
    ],
    ids=["isolation", "commit-without-txn", "offsets-without-group", "marker-type"],
)
def test_a_malformed_transaction_line_is_refused_by_line(line: str, message: str) -> None:
    with pytest.raises(ValueError, match=r"^h:1: not a history line") as raised:
        History.parse([line], source="h")
    assert message in str(raised.value)


def test_op_end_refuses_what_ends_no_transaction() -> None:
    with pytest.raises(ValueError, match="'send' ends no transaction"):
        Op.end(OpType.OK, "send", "p", time_ms=0, txn="p:0")


def test_transaction_anomalies_appear_in_the_json_and_html_reports() -> None:
    run = interleaved()
    run.read("b0", 1, 60, process="consumer-9")
    h = run.history()
    report = check(h)
    assert report.to_dict()["transactions"]["aborted_reads"][0]["txn"] == "tx-b:0"
    assert report.to_dict()["counts"]["aborted_reads"] == 1
    page = render(h, report)
    assert "aborted reads (G1a) (1):" in page
    assert "consumer-9 (read_committed) read &#x27;b0&#x27; at out-0 offset 1" in page


def test_a_non_transactional_history_reports_no_transaction_lines() -> None:
    run = Run()
    op = Op(OpType.OK, "send", "p", 0, T, 0, "v", offset=0)
    run.h.ops.append(op)
    run.logs[0], run.ends[0] = [(0, "v")], 1
    report = check(run.history())
    assert not any(line.startswith("transactions:") for line in report.verdict_lines())
    assert report.transactions.transactions == 0


# -- property: any history of correct transactions checks SAFE ------------------------------------


@st.composite
def correct_transactions(draw: st.DrawFn) -> History:
    """A model of correct KIP-98 partitions: producers interleave transactions over two
    partitions; each commits (ok, or timed out after the markers went out either way) or
    aborts; markers follow the outcome; a read_committed consumer reads, at the end, exactly
    the committed records in offset order; a read_uncommitted consumer reads everything; the
    group offsets read back are the last committed transaction's."""
    run = Run()
    t = 0
    last_committed_offset: int | None = None
    for n in range(draw(st.integers(0, 8))):
        txn = f"tx-{draw(st.sampled_from('abc'))}:{n}"
        for i in range(draw(st.integers(1, 3))):
            run.send(txn, f"{txn}/{i}", t, partition=draw(st.integers(0, 1)))
            t += 2
        run.offsets(txn, n + 1, t)
        fate = draw(st.sampled_from(["commit", "abort", "commit-failed", "unknown-committed",
                                     "unknown-aborted"]))  # fmt: skip
        if fate == "commit":
            run.end(txn, t)
        elif fate == "abort":
            run.end(txn, t, f=ABORT)
        elif fate == "commit-failed":
            run.end(txn, t, outcome=OpType.FAIL)
        else:
            marker = "COMMIT" if fate == "unknown-committed" else "ABORT"
            run.end(txn, t, outcome=OpType.INFO, marker=marker)
        if fate in ("commit", "unknown-committed"):
            last_committed_offset = n + 1
        t += 3
    committed = {op.value for op in run.h.ops if op.txn and run.fates.get(op.txn) == "COMMIT"}
    for partition in sorted(run.logs):
        for offset, value in run.logs[partition]:
            if value in committed:
                run.read(value, offset, 1000 + offset, partition=partition)
            run.read(value, offset, 2000 + offset, process="consumer-2", partition=partition,
                     isolation=READ_UNCOMMITTED)  # fmt: skip
    if last_committed_offset is not None:
        run.h.final_group_offsets[(GROUP, IN, 0)] = last_committed_offset
    return run.history()


@given(correct_transactions())
def test_any_history_of_correct_transactions_checks_safe(h: History) -> None:
    report = check(h)
    assert report.ok, report.verdict_lines()


def test_a_committed_transaction_answers_for_an_offset_an_unknown_one_sent_too() -> None:
    """Two transactions sent group offset 5 (the second consumed nothing new): the committed
    one is held to its writes, whatever became of the other."""
    run = Run()
    run.send("tx-a:0", "a0", 0)
    run.offsets("tx-a:0", 5, 1)
    run.end("tx-a:0", 5, outcome=OpType.INFO, marker="ABORT")
    run.send("tx-a:1", "a1", 10, outcome=OpType.INFO, written=False)
    run.offsets("tx-a:1", 5, 11)
    run.end("tx-a:1", 15)
    run.h.final_group_offsets[(GROUP, IN, 0)] = 5
    [found] = check(run.history()).transactions.offsets_without_writes
    assert (found.txn, found.outcome, found.missing) == ("tx-a:1", "committed", ((T, 0, "a1"),))


def test_check_command_exits_1_on_an_aborted_read_and_names_it(tmp_path: Path) -> None:
    run = interleaved()
    run.read("b0", 1, 60, process="consumer-9")
    path = tmp_path / "g1a.jsonl"
    run.history().write(path)
    out = kafkasim("check", str(path), timeout=120)
    assert out.returncode == 1, out.stderr
    assert out.stdout.startswith("VERDICT: ANOMALIES — 4 acknowledged")
    assert "aborted reads (G1a) (1):" in out.stdout
