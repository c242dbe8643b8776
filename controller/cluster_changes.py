"""What the controller does when it takes charge and when the cluster changes under it:
failover (Kafka's ``onControllerFailover``), a reconnection with the same session, and the
ZooKeeper watches on brokers (``/brokers/ids``), topics (``/brokers/topics``), a topic's
partitions and ISR change notifications (``/isr_change_notification``).

Each watch event re-reads what it watches (setting the one-shot watch again), compares with
the :class:`~controller.context.ControllerContext`, and reacts through the partition state
machine, topic deletion and leadership rooms.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from kafkasim.common.coordination import EventType, NoNodeError, Watcher, WatchEvent
from kafkasim.common.types import TopicPartition
from kafkasim.controller import zk_data
from kafkasim.controller.channel import ControllerChannel, RequestBatch
from kafkasim.controller.core import _Event
from kafkasim.controller.leadership import Leadership
from kafkasim.controller.topic_deletion import TopicDeletion
from kafkasim.controller.zk_data import BrokerInfo


class ClusterChanges(Leadership, TopicDeletion):
    """Failover, reconnection, and the reactions to broker, topic, partition and ISR changes."""

    # Made by Controller.__init__ (one watcher object per path).
    _broker_change_watcher: Watcher
    _topic_change_watcher: Watcher
    _isr_change_watcher: Watcher

    # -- becoming controller ------------------------------------------------------------------

    async def _on_controller_failover(self) -> None:
        """Load the cluster from ZooKeeper, register watches, resend every partition's state
        and elect leaders where needed (Kafka's ``onControllerFailover``)."""
        ctx = self._require_ctx()
        ctx.cluster_id = await self._read_cluster_id()
        self._channel = ControllerChannel(
            self._transport,
            request_timeout_s=self._config.controller_socket_timeout_ms / 1000,
            backoff_initial_s=self._config.request_backoff_ms / 1000,
            backoff_max_s=self._config.request_backoff_max_ms / 1000,
        )
        for info in (await self._read_live_brokers()).values():
            ctx.live_brokers[info.broker_id] = info
            self._channel.add_broker(info)
        for topic in sorted(
            await self._zk.get_children(zk_data.BROKER_TOPICS, self._topic_change_watcher)
        ):
            await self._load_topic(topic)
        for tp in ctx.all_partitions():
            state = await self._read_partition_state(tp)
            if state is not None:
                ctx.partition_states[tp] = state
        # Notifications written before now are covered by the states just read.
        await self._delete_isr_change_notifications(
            await self._zk.get_children(zk_data.ISR_CHANGE_NOTIFICATION, self._isr_change_watcher)
        )
        # Every live replica gets its partitions' state at the new epoch, after the elections
        # this controller owes (one batch: a newer state of a partition replaces the older).
        batch = RequestBatch()
        live = ctx.live_or_shutting_down_ids()
        for tp, state in sorted(ctx.partition_states.items()):
            if not ctx.is_being_deleted(tp.topic):
                self._add_leader_and_isr(batch, ctx.replicas(tp), tp, state)
        batch.add_update_metadata(live)
        await self._trigger_online_partition_state_change(batch)
        # Replicas on brokers that died before this controller took over leave the ISRs now
        # (Kafka's replica state machine startup moves them to OfflineReplica).
        assigned = {b for tp in ctx.all_partitions() for b in ctx.replicas(tp)}
        await self._offline_replicas_leave_isr(sorted(assigned - live), batch)
        self._send(batch)
        await self._process_topic_deletion()
        await self._process_preferred_election_znode()
        if self._config.auto_leader_rebalance_enable:
            self._rebalance_task = asyncio.get_running_loop().create_task(
                self._rebalance_timer(), name=f"controller-{self.broker_id}-rebalance"
            )

    async def _process_reconnected(self) -> None:
        await self._maybe_resign()
        if not self.is_active:
            await self._elect()
            return
        await self._process_broker_change()
        await self._process_topic_change()
        for topic in sorted(self._require_ctx().assignments):
            await self._process_partition_modifications(topic)
        await self._process_isr_change_notification()
        await self._process_topic_deletion()
        await self._process_preferred_election_znode()

    async def _read_live_brokers(self) -> dict[int, BrokerInfo]:
        """Registered brokers, re-registering the children watch; epoch = znode czxid."""
        brokers: dict[int, BrokerInfo] = {}
        for child in await self._zk.get_children(zk_data.BROKER_IDS, self._broker_change_watcher):
            try:
                broker_id = int(child)
                data, stat = await self._zk.get(zk_data.broker_path(broker_id))
                brokers[broker_id] = zk_data.decode_broker(
                    broker_id, data, stat.czxid, self._config.inter_broker_listener_name
                )
            except NoNodeError:
                continue
            except (ValueError, KeyError, IndexError) as e:
                self._log.error("ignoring malformed broker registration %s: %s", child, e)
        return dict(sorted(brokers.items()))

    def _partition_watcher(self, topic: str) -> Watcher:
        watcher = self._partition_watchers.get(topic)
        if watcher is None:

            def watcher(event: WatchEvent) -> None:
                if event.type is not EventType.DELETED:
                    self._enqueue(
                        _Event(
                            "PartitionModifications",
                            lambda: self._process_partition_modifications(topic),
                        )
                    )

            self._partition_watchers[topic] = watcher
        return watcher

    async def _load_topic(self, topic: str) -> bool:
        """Read a topic's assignment into the context (with its data watch); False if gone."""
        try:
            data, stat = await self._zk.get(
                zk_data.topic_path(topic), self._partition_watcher(topic)
            )
        except NoNodeError:
            return False
        try:
            assignment = zk_data.decode_topic_assignment(data)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            self._log.error("ignoring topic %s: malformed assignment: %s", topic, e)
            return False
        self._require_ctx().add_topic(topic, assignment, stat.version)
        return True

    # -- broker changes -----------------------------------------------------------------------

    async def _process_broker_change(self) -> None:
        ctx = self._require_ctx()
        channel = self._channel
        assert channel is not None
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
        ctx = self._require_ctx()
        existing = sorted(ctx.live_or_shutting_down_ids() - set(new))
        batch = RequestBatch()
        batch.add_update_metadata(existing)
        self._send(batch)
        batch = RequestBatch()
        known = [tp for tp in sorted(ctx.partition_states) if not ctx.is_being_deleted(tp.topic)]
        self._add_update_metadata(batch, new, known)
        self._send(batch)
        batch = RequestBatch()
        for b in new:
            for tp in ctx.partitions_on_broker(b):
                state = ctx.partition_states.get(tp)
                if state is not None and not ctx.is_being_deleted(tp.topic):
                    self._add_leader_and_isr(batch, [b], tp, state)
        await self._trigger_online_partition_state_change(batch)
        self._send(batch)
        await self._try_topic_deletion(restarted=set(new))

    async def _on_broker_failure(self, dead: Sequence[int]) -> None:
        """Elect new leaders where the dead brokers led, then remove them from the ISRs of
        the rest (Kafka's ``onBrokerFailure`` / ``onReplicasBecomeOffline``)."""
        ctx = self._require_ctx()
        ctx.shutting_down.difference_update(dead)
        batch = RequestBatch()
        await self._trigger_online_partition_state_change(batch)
        await self._offline_replicas_leave_isr(dead, batch)
        for topic in sorted(ctx.topics_to_delete):
            if any(b in ctx.replicas(tp) for tp in ctx.partitions_of(topic) for b in dead):
                self._log.info("deletion of topic %s waits for brokers %s", topic, list(dead))
        if batch.is_empty():
            # Nothing changed leader or ISR: still tell everyone which brokers are gone.
            batch.add_update_metadata(sorted(ctx.live_or_shutting_down_ids()))
        self._send(batch)

    # -- topic and partition changes ----------------------------------------------------------

    async def _process_topic_change(self) -> None:
        ctx = self._require_ctx()
        topics = set(await self._zk.get_children(zk_data.BROKER_TOPICS, self._topic_change_watcher))
        known = set(ctx.assignments)
        batch = RequestBatch()
        for topic in sorted(known - topics):
            self._log.info("topic %s is gone from ZooKeeper", topic)
            ctx.remove_topic(topic)
            self._partition_watchers.pop(topic, None)
            batch.add_deleted_topics(sorted(ctx.live_or_shutting_down_ids()), [topic])
        created: list[TopicPartition] = []
        for topic in sorted(topics - known):
            if await self._load_topic(topic):
                self._log.info("new topic %s: assignment %s", topic, ctx.assignments[topic])
                created.extend(ctx.partitions_of(topic))
        await self._on_new_partitions(created, batch)
        self._send(batch)

    async def _process_partition_modifications(self, topic: str) -> None:
        ctx = self._require_ctx()
        if topic not in ctx.assignments:
            return
        try:
            data, stat = await self._zk.get(
                zk_data.topic_path(topic), self._partition_watcher(topic)
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
        self._log.info("topic %s: new partitions %s", topic, dict(sorted(added.items())))
        batch = RequestBatch()
        await self._on_new_partitions([TopicPartition(topic, p) for p in sorted(added)], batch)
        self._send(batch)

    # -- ISR change notifications -------------------------------------------------------------

    async def _process_isr_change_notification(self) -> None:
        """Leaders changed ISRs: refresh those states and broadcast them (UpdateMetadata)."""
        ctx = self._require_ctx()
        children = await self._zk.get_children(
            zk_data.ISR_CHANGE_NOTIFICATION, self._isr_change_watcher
        )
        try:
            changed: set[TopicPartition] = set()
            for child in sorted(children):
                try:
                    data, _ = await self._zk.get(f"{zk_data.ISR_CHANGE_NOTIFICATION}/{child}")
                    changed.update(zk_data.decode_isr_change(data))
                except NoNodeError:
                    continue
                except (ValueError, KeyError, TypeError) as e:
                    self._log.error("ignoring malformed ISR change notification %s: %s", child, e)
            refreshed: list[TopicPartition] = []
            for tp in sorted(changed):
                if not ctx.replicas(tp) or ctx.is_being_deleted(tp.topic):
                    continue
                state = await self._read_partition_state(tp)
                if state is not None:
                    ctx.partition_states[tp] = state
                    refreshed.append(tp)
            if refreshed:
                batch = RequestBatch()
                self._add_update_metadata(batch, sorted(ctx.live_or_shutting_down_ids()), refreshed)
                self._send(batch)
        finally:
            await self._delete_isr_change_notifications(children)

    async def _delete_isr_change_notifications(self, children: Iterable[str]) -> None:
        for child in sorted(children):
            await self._fenced_delete(f"{zk_data.ISR_CHANGE_NOTIFICATION}/{child}")
