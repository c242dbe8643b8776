"""A controller term on its own: the requests its helpers put in a batch and send."""

from __future__ import annotations

from kafkasim.common.types import TopicPartition
from kafkasim.controller.channel import RequestBatch
from kafkasim.controller.zk_data import LeaderAndIsr

from .harness import run
from .term_bench import term_bench

T0 = TopicPartition("t", 0)


def test_leader_and_isr_goes_to_live_recipients_and_metadata_to_every_live_broker() -> None:
    async def scenario() -> None:
        bench = await term_bench([1, 2, 4], {"t": {0: [1, 2, 3]}})
        term = bench.term
        state = LeaderAndIsr(1, 3, (1, 2), term.ctx.epoch)
        term.ctx.leadership[T0] = state
        batch = RequestBatch()
        term.add_leader_and_isr(batch, [1, 2, 3], T0, state)
        term.send(batch)
        transport = await bench.sent()
        assert [b for b in (1, 2, 3, 4) if transport.leader_and_isr(b)] == [1, 2]
        [request] = transport.leader_and_isr(1)
        assert request.controller_epoch == term.ctx.epoch and request.controller_id == 1
        assert request.broker_epoch == 101  # the recipient's epoch, KIP-380
        [s] = request.partition_states
        assert (s.leader, s.leader_epoch, list(s.isr), list(s.offline_replicas)) == (
            1,
            3,
            [1, 2],
            [3],
        )
        for b in (1, 2, 4):
            [metadata] = transport.update_metadata(b)
            assert [p.partition for p in metadata.partition_states] == [0]
        await bench.close()

    run(scenario)


def test_an_empty_batch_sends_nothing_and_unknown_states_are_left_out() -> None:
    async def scenario() -> None:
        bench = await term_bench([1], {"t": {0: [1]}})
        bench.term.send(RequestBatch())
        batch = RequestBatch()
        bench.term.add_update_metadata(batch, [1], [T0])  # t-0 has no state yet
        bench.term.send(batch)
        transport = await bench.sent()
        assert not transport.leader_and_isr()
        [metadata] = transport.update_metadata(1)
        assert not metadata.partition_states
        await bench.close()

    run(scenario)
