"""Topic deletion (Kafka's ``TopicDeletionManager``).

A deletion request is a ``/admin/delete_topics/<t>`` znode (written by DeleteTopics, see
:mod:`controller.topic_admin`, or by hand). The controller queues the topic, waits until every
replica's broker is live, tells every broker the topic is gone (UpdateMetadata), moves its
partitions to NonExistentPartition and sends StopReplica(delete) to each replica; when all have
acknowledged, it deletes the topic's znodes (fenced, bottom up) and forgets it. A replica that
fails is asked again when its broker restarts or a new controller takes over.
"""

from __future__ import annotations

from collections.abc import Collection

from kafkasim.common.coordination import DeleteOp, NoNodeError, NotEmptyError
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.channel import RequestBatch
from kafkasim.controller.partition_state_machine import PartitionStateMachine
from kafkasim.controller.term import Term
from kafkasim.proto import kafkasim_pb2 as pb

_TOPIC_DELETE_ATTEMPTS_MAX = 5


class TopicDeletionManager:
    """Queued topic deletions of one term, driven to completion by StopReplica answers."""

    def __init__(self, term: Term, partitions: PartitionStateMachine) -> None:
        self._term = term
        self._ctx = term.ctx
        self._zk = term.zk
        self._log = term.log
        self._partitions = partitions

    async def process_deletion_requests(self) -> None:
        """``/admin/delete_topics`` children: queue the existing topics and try deleting."""
        ctx = self._ctx
        children = sorted(
            await self._zk.zk.get_children(zk_data.DELETE_TOPICS, self._term.watches.topic_deletion)
        )
        if not children:
            return
        if not self._term.config.delete_topic_enable:
            self._log.info("removing deletion requests for %s: topic deletion is off", children)
            for topic in children:
                await self._zk.fenced_delete(zk_data.delete_topic_path(topic))
            return
        for topic in children:
            if topic not in ctx.assignments:
                self._log.warning("ignoring request to delete non-existing topic %s", topic)
                await self._zk.fenced_delete(zk_data.delete_topic_path(topic))
            elif topic not in ctx.topics_to_delete:
                self._log.info("topic %s queued for deletion", topic)
                ctx.topics_to_delete.add(topic)
        await self.resume(())

    async def resume(self, restarted: Collection[int]) -> None:
        """Start the deletion of queued topics whose replicas are all on live brokers: tell
        every broker the topic is gone, StopReplica(delete) to each replica; complete once all
        replicas acknowledged. Pending replicas on ``restarted`` brokers are asked again."""
        ctx = self._ctx
        batch = RequestBatch()
        live = ctx.live_or_shutting_down_ids()
        completed: list[str] = []
        for topic in sorted(ctx.topics_to_delete):
            pending = ctx.deletion_pending.get(topic)
            if pending is None:
                replicas = {(tp, b) for tp in ctx.partitions_of(topic) for b in ctx.replicas(tp)}
                offline = sorted({b for _, b in replicas if b not in live})
                if offline:
                    self._log.info(
                        "deletion of topic %s waits for brokers %s to come back", topic, offline
                    )
                    continue
                ctx.deletion_pending[topic] = replicas
                self._partitions.to_non_existent(ctx.partitions_of(topic))
                batch.add_deleted_topics(sorted(live), [topic])
                resend = sorted(replicas)
            else:
                resend = sorted((tp, b) for tp, b in pending if b in restarted)
            for tp, b in resend:
                state = ctx.leadership.get(tp)
                batch.add_stop_replica(
                    [b], tp, delete=True, leader_epoch=-1 if state is None else state.leader_epoch
                )
            if not ctx.deletion_pending[topic]:
                completed.append(topic)
        self._term.send(batch)
        for topic in completed:
            await self._complete(topic)

    def waits_for(self, dead: Collection[int]) -> None:
        """Log the queued deletions that now wait for ``dead`` brokers."""
        ctx = self._ctx
        for topic in sorted(ctx.topics_to_delete):
            if any(b in ctx.replicas(tp) for tp in ctx.partitions_of(topic) for b in dead):
                self._log.info("deletion of topic %s waits for brokers %s", topic, list(dead))

    async def on_stop_replica_response(
        self, broker_id: int, request: pb.StopReplicaRequest, response: pb.StopReplicaResponse
    ) -> None:
        """A replica acknowledged its deletion (or failed: it is asked again when its broker
        restarts or a new controller takes over). The topic completes when all did."""
        ctx = self._ctx
        errors = {(e.topic, e.partition): e.error_code for e in response.partition_errors}
        touched: set[str] = set()
        for part in request.partitions:
            pending = ctx.deletion_pending.get(part.topic)
            if not part.delete_partition or pending is None:
                continue
            code = response.error_code or errors.get((part.topic, part.partition), 0)
            if code:
                self._log.warning(
                    "broker %d could not delete %s-%d (error %d); retried when it restarts",
                    broker_id,
                    part.topic,
                    part.partition,
                    code,
                )
                continue
            pending.discard((TopicPartition(part.topic, part.partition), broker_id))
            touched.add(part.topic)
        for topic in sorted(touched):
            pending = ctx.deletion_pending.get(topic)
            if pending is not None and not pending:
                await self._complete(topic)

    async def _complete(self, topic: str) -> None:
        """Delete the topic's znodes (fenced, bottom up) and forget it."""
        zk = self._zk.zk
        for attempt in range(1, _TOPIC_DELETE_ATTEMPTS_MAX + 1):
            paths: list[str] = []
            partitions = await self._zk.children_or_empty(zk_data.partitions_path(topic))
            for p in sorted(partitions, key=lambda s: int(s) if s.isdigit() else -1):
                tp_path = f"{zk_data.partitions_path(topic)}/{p}"
                for child in await self._zk.children_or_empty(tp_path):
                    paths.append(f"{tp_path}/{child}")
                paths.append(tp_path)
            if partitions or await zk.exists(zk_data.partitions_path(topic)) is not None:
                paths.append(zk_data.partitions_path(topic))
            for path in (
                zk_data.topic_path(topic),
                zk_data.topic_config_path(topic),
                zk_data.delete_topic_path(topic),
            ):
                if await zk.exists(path) is not None:
                    paths.append(path)
            try:
                if paths:
                    await self._zk.fenced([DeleteOp(p) for p in paths])
                break
            except (NoNodeError, NotEmptyError) as e:
                if attempt == _TOPIC_DELETE_ATTEMPTS_MAX:
                    self._log.error("could not delete the znodes of topic %s: %s", topic, e)
                    return
        self._ctx.remove_topic(topic)
        self._term.watches.forget_partition(topic)
        self._log.info("deletion of topic %s successfully completed", topic)
