"""What the active controller does when it takes charge and when the cluster changes under
it: failover (Kafka's ``onControllerFailover``), a reconnection with the same session, and
the ZooKeeper watches on brokers (``/brokers/ids``), topics (``/brokers/topics``), a topic's
partitions and ISR change notifications (``/isr_change_notification``).

Each watch event re-reads what it watches (setting the one-shot watch again), compares with
the :class:`~controller.context.ControllerContext`, and reacts through the partition state
machine, the topic deletion manager and the leadership handlers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kafkasim.common.coordination import NoNodeError
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.campaign import read_cluster_id
from kafkasim.controller.channel import RequestBatch
from kafkasim.controller.leadership import Leadership
from kafkasim.controller.partition_state_machine import PartitionStateMachine
from kafkasim.controller.term import Term
from kafkasim.controller.topic_deletion import TopicDeletionManager
from kafkasim.controller.zk_data import BrokerInfo


class ClusterChanges:
    """Failover, resynchronisation, and the reactions to broker, topic, partition and ISR
    changes, for one term."""

    def __init__(
        self,
        term: Term,
        partitions: PartitionStateMachine,
        deletion: TopicDeletionManager,
        leadership: Leadership,
    ) -> None:
        self._term = term
        self._ctx = term.ctx
        self._zk = term.zk
        self._log = term.log
        self._watches = term.watches
        self._partitions = partitions
        self._deletion = deletion
        self._leadership = leadership

    # -- becoming controller ------------------------------------------------------------------

    async def on_controller_failover(self) -> None:
        """Load the cluster from ZooKeeper, register watches, resend every partition's state
        and elect leaders where needed (Kafka's ``onControllerFailover``)."""
        ctx = self._ctx
        ctx.cluster_id = await read_cluster_id(self._zk.zk, self._term.config.cluster_id)
        for info in (await self._read_live_brokers()).values():
            ctx.live_brokers[info.broker_id] = info
            self._term.channel.add_broker(info)
        for topic in sorted(
            await self._zk.zk.get_children(zk_data.BROKER_TOPICS, self._watches.topic_change)
        ):
            await self._load_topic(topic)
        for tp in ctx.all_partitions():
            state = await self._zk.read_partition_state(tp)
            if state is not None:
                ctx.leadership[tp] = state
        self._partitions.initialize_states()
        # Notifications written before now are covered by the states just read.
        await self._delete_isr_change_notifications(
            await self._zk.zk.get_children(
                zk_data.ISR_CHANGE_NOTIFICATION, self._watches.isr_change
            )
        )
        # Every live broker first learns the live brokers and every partition's state as read
        # (Kafka sends this UpdateMetadata before its state machines start): a broker that has
        # just restarted must know the cluster before it acts on a LeaderAndIsr, or it would
        # take the partitions it does not know yet for deleted ones.
        live = ctx.live_or_shutting_down_ids()
        self._send_every_partition(sorted(live))
        # Then every live replica gets its partitions' state at the new epoch, after the
        # elections this controller owes (one batch: a newer state of a partition replaces the
        # older).
        batch = RequestBatch()
        for tp, state in sorted(ctx.leadership.items()):
            if not ctx.is_being_deleted(tp.topic):
                self._term.add_leader_and_isr(batch, ctx.replicas(tp), tp, state)
        batch.add_update_metadata(live)
        await self._partitions.trigger_online_partition_state_change(batch)
        # Replicas on brokers that died before this controller took over leave the ISRs now
        # (Kafka's replica state machine startup moves them to OfflineReplica).
        assigned = {b for tp in ctx.all_partitions() for b in ctx.replicas(tp)}
        await self._partitions.offline_replicas_leave_isr(sorted(assigned - live), batch)
        self._term.send(batch)
        await self._deletion.process_deletion_requests()
        await self._leadership.process_preferred_election_znode()

    async def resync(self) -> None:
        """After a reconnection with the same session: the watches were dropped with the
        connection, so every one is set again by re-reading what it watches."""
        await self.process_broker_change()
        await self.process_topic_change()
        for topic in sorted(self._ctx.assignments):
            await self.process_partition_modifications(topic)
        await self.process_isr_change_notification()
        await self._deletion.process_deletion_requests()
        await self._leadership.process_preferred_election_znode()

    async def _read_live_brokers(self) -> dict[int, BrokerInfo]:
        """Registered brokers, re-registering the children watch; epoch = znode czxid."""
        brokers: dict[int, BrokerInfo] = {}
        for child in await self._zk.zk.get_children(
            zk_data.BROKER_IDS, self._watches.broker_change
        ):
            try:
                broker_id = int(child)
                data, stat = await self._zk.zk.get(zk_data.broker_path(broker_id))
                brokers[broker_id] = zk_data.decode_broker(
                    broker_id, data, stat.czxid, self._term.config.inter_broker_listener_name
                )
            except NoNodeError:
                continue
            except (ValueError, KeyError, IndexError) as e:
                self._log.error("ignoring malformed broker registration %s: %s", child, e)
        return dict(sorted(brokers.items()))

    async def _load_topic(self, topic: str) -> bool:
        """Read a topic's assignment into the context (with its data watch); False if gone."""
        try:
            data, stat = await self._zk.zk.get(
                zk_data.topic_path(topic), self._watches.partition(topic)
            )
        except NoNodeError:
            return False
        try:
            assignment = zk_data.decode_topic_assignment(data)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            self._log.error("ignoring topic %s: malformed assignment: %s", topic, e)
            return False
        self._ctx.add_topic(topic, assignment, stat.version)
        self._partitions.add_new(self._ctx.partitions_of(topic))
        return True

    # -- broker changes -----------------------------------------------------------------------

    async def process_broker_change(self) -> None:
        ctx = self._ctx
        channel = self._term.channel
        current = await self._read_live_brokers()
        known = dict(ctx.live_brokers)
        new = sorted(set(current) - set(known))
        dead = sorted(set(known) - set(current))
        bounced = sorted(b for b in set(current) & set(known) if current[b].epoch > known[b].epoch)
        if new or dead or bounced:
            self._log.info(
                "broker change: new %s, dead %s, bounced %s, live %s",
                new,
                dead,
                bounced,
                sorted(current),
            )
        for b in new + bounced:
            channel.add_broker(current[b])
        for b in dead:
            channel.remove_broker(b)
        if new:
            ctx.live_brokers.update({b: current[b] for b in new})
            await self._on_broker_startup(new)
        if bounced:
            for b in bounced:
                del ctx.live_brokers[b]
            await self._on_broker_failure(bounced)
            ctx.live_brokers.update({b: current[b] for b in bounced})
            await self._on_broker_startup(bounced)
        if dead:
            for b in dead:
                del ctx.live_brokers[b]
            await self._on_broker_failure(dead)

    async def _on_broker_startup(self, new: Sequence[int]) -> None:
        """Tell everyone about the new brokers, tell the new brokers everything, and elect
        where they make it possible (Kafka's ``onBrokerStartup``)."""
        ctx = self._ctx
        existing = sorted(ctx.live_or_shutting_down_ids() - set(new))
        batch = RequestBatch()
        batch.add_update_metadata(existing)
        self._term.send(batch)
        self._send_every_partition(new)
        batch = RequestBatch()
        for b in new:
            for tp in ctx.partitions_on_broker(b):
                state = ctx.leadership.get(tp)
                if state is not None and not ctx.is_being_deleted(tp.topic):
                    self._term.add_leader_and_isr(batch, [b], tp, state)
        await self._partitions.trigger_online_partition_state_change(batch)
        self._term.send(batch)
        await self._deletion.resume(set(new))

    def _send_every_partition(self, broker_ids: Sequence[int]) -> None:
        """UpdateMetadata of every partition the controller knows (not being deleted), in a
        batch of its own, to ``broker_ids``."""
        ctx = self._ctx
        batch = RequestBatch()
        known = [tp for tp in sorted(ctx.leadership) if not ctx.is_being_deleted(tp.topic)]
        self._term.add_update_metadata(batch, broker_ids, known)
        self._term.send(batch)

    async def _on_broker_failure(self, dead: Sequence[int]) -> None:
        """Elect new leaders where the dead brokers led, then remove them from the ISRs of
        the rest (Kafka's ``onBrokerFailure`` / ``onReplicasBecomeOffline``)."""
        ctx = self._ctx
        ctx.shutting_down.difference_update(dead)
        batch = RequestBatch()
        await self._partitions.trigger_online_partition_state_change(batch)
        await self._partitions.offline_replicas_leave_isr(dead, batch)
        self._deletion.waits_for(dead)
        if batch.is_empty():
            # Nothing changed leader or ISR: still tell everyone which brokers are gone.
            batch.add_update_metadata(sorted(ctx.live_or_shutting_down_ids()))
        self._term.send(batch)

    # -- topic and partition changes ----------------------------------------------------------

    async def process_topic_change(self) -> None:
        ctx = self._ctx
        topics = set(
            await self._zk.zk.get_children(zk_data.BROKER_TOPICS, self._watches.topic_change)
        )
        known = set(ctx.assignments)
        batch = RequestBatch()
        for topic in sorted(known - topics):
            self._log.info("topic %s is gone from ZooKeeper", topic)
            ctx.remove_topic(topic)
            self._watches.forget_partition(topic)
            batch.add_deleted_topics(sorted(ctx.live_or_shutting_down_ids()), [topic])
        created: list[TopicPartition] = []
        for topic in sorted(topics - known):
            if await self._load_topic(topic):
                self._log.info("new topic %s: assignment %s", topic, ctx.assignments[topic])
                created.extend(ctx.partitions_of(topic))
        await self._partitions.on_new_partitions(created, batch)
        self._term.send(batch)

    async def process_partition_modifications(self, topic: str) -> None:
        ctx = self._ctx
        if topic not in ctx.assignments:
            return
        try:
            data, stat = await self._zk.zk.get(
                zk_data.topic_path(topic), self._watches.partition(topic)
            )
        except NoNodeError:
            return
        assignment = zk_data.decode_topic_assignment(data)
        ctx.topic_zk_versions[topic] = stat.version
        if ctx.is_being_deleted(topic):
            self._log.info("not adding partitions to topic %s: it is being deleted", topic)
            return
        existing = ctx.assignments[topic]
        added = {p: tuple(r) for p, r in assignment.items() if p not in existing}
        if not added:
            return
        existing.update(added)
        new_partitions = [TopicPartition(topic, p) for p in sorted(added)]
        self._partitions.add_new(new_partitions)
        self._log.info("topic %s: new partitions %s", topic, dict(sorted(added.items())))
        batch = RequestBatch()
        await self._partitions.on_new_partitions(new_partitions, batch)
        self._term.send(batch)

    # -- ISR change notifications -------------------------------------------------------------

    async def process_isr_change_notification(self) -> None:
        """Leaders changed ISRs: refresh those states and broadcast them (UpdateMetadata)."""
        ctx = self._ctx
        children = await self._zk.zk.get_children(
            zk_data.ISR_CHANGE_NOTIFICATION, self._watches.isr_change
        )
        try:
            changed: set[TopicPartition] = set()
            for child in sorted(children):
                try:
                    data, _ = await self._zk.zk.get(f"{zk_data.ISR_CHANGE_NOTIFICATION}/{child}")
                    changed.update(zk_data.decode_isr_change(data))
                except NoNodeError:
                    continue
                except (ValueError, KeyError, TypeError) as e:
                    self._log.error("ignoring malformed ISR change notification %s: %s", child, e)
            refreshed: list[TopicPartition] = []
            for tp in sorted(changed):
                if not ctx.replicas(tp) or ctx.is_being_deleted(tp.topic):
                    continue
                state = await self._zk.read_partition_state(tp)
                if state is not None:
                    ctx.leadership[tp] = state
                    refreshed.append(tp)
            if refreshed:
                batch = RequestBatch()
                self._term.add_update_metadata(
                    batch, sorted(ctx.live_or_shutting_down_ids()), refreshed
                )
                self._term.send(batch)
        finally:
            await self._delete_isr_change_notifications(children)

    async def _delete_isr_change_notifications(self, children: Iterable[str]) -> None:
        for child in sorted(children):
            await self._zk.fenced_delete(f"{zk_data.ISR_CHANGE_NOTIFICATION}/{child}")
