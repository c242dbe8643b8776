"""Topic and dynamic broker config changes reaching a broker without a restart (Kafka's
``ZkConfigManager``).

The broker serving a config change (``node.topic_config_admin``: any broker, as in Kafka)
writes a topic's overrides to ``/config/topics/<t>`` and, in the same multi,
a persistent sequential ``/config/changes/config_change_<seq>`` holding
``{"version":2,"entity_path":"topics/<t>"}``. Every broker keeps a child watch on
``/config/changes``; for each notification newer than the last it handled it re-reads that
topic's overrides, replaces the broker's cached :class:`~storage.config.LogConfig` of the
topic and hands it to every live :class:`~storage.log.Log` of the topic
(``Log.update_config``): retention, cleanup policy, min.insync.replicas and the rest apply
from the next append, fetch or retention pass.

Rules:

1. At start, notifications already there are skipped: the broker has no cached config yet
   and reads each topic's overrides when it first hosts the topic.
2. Watches are one-shot and a lost connection drops them (kazoo does not restore them): a
   watch event, a reconnection (CONNECTED) or a new session makes one processing pass, which
   re-reads the children and sets the watch again. Passes never overlap; events arriving
   during a pass cause one more.
3. The writing broker keeps only the newest notifications, purging the oldest first: so if the
   one this broker handled last is gone, newer ones it never read may be gone too. Then, and
   when a notification is gone between listing and reading it, and with a new session
   (after expiry), every cached topic config is reloaded.
4. A notification that cannot be decoded, or names another entity type, is logged and
   skipped; a config in ZooKeeper that does not parse keeps the previous one (logged).
5. A ``brokers/<default>`` or ``brokers/<this broker's id>`` notification re-reads both
   znodes (``node.broker_config_admin.load_dynamic_config``); when the dynamic configs in
   force change, every cached topic config is recomputed with the new defaults and handed to
   the topic's live logs. Another broker's notification is skipped. A full reload (rule 3)
   re-reads them too.
6. A ``users/<user>`` notification re-reads that user's SCRAM credentials into the broker's
   credential cache (``node.scram_cache``); a full reload (rule 3) re-reads every user's.

Not thread-safe: runs on the broker's event loop; watch callbacks only schedule a pass.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping

from kafkasim.common.coordination import (
    Coordination,
    CoordinationError,
    NoNodeError,
)
from kafkasim.common.errors import KafkaError
from kafkasim.controller import zk_data
from kafkasim.node.broker_config_admin import load_dynamic_config
from kafkasim.node.config import BrokerConfig
from kafkasim.node.notification_passes import SerialPasses
from kafkasim.node.scram_cache import ScramCredentialCache
from kafkasim.storage.config import LogConfig
from kafkasim.storage.log_manager import LogManager

logger = logging.getLogger(__name__)

TOPICS_ENTITY = "topics"
BROKERS_ENTITY = "brokers"


class TopicConfigChangeListener:
    """Watches ``/config/changes`` and applies topic config changes to this broker.

    ``topic_configs`` is the broker's cache of effective topic configs (shared: the broker
    reads it when it creates a log); ``last_executed`` is the sequence number of the newest
    notification handled (-1: none yet).
    """

    def __init__(
        self,
        broker_id: int,
        coordination: Coordination,
        broker_config: BrokerConfig,
        topic_configs: MutableMapping[str, LogConfig],
        log_manager: LogManager,
        *,
        scram_credentials: ScramCredentialCache | None = None,
    ) -> None:
        self.broker_id = broker_id
        self._zk = coordination
        self._broker_config = broker_config
        self._topic_configs = topic_configs
        self._log_manager = log_manager
        self._scram_credentials = scram_credentials
        self.last_executed = -1
        self.changes_applied = 0
        self._reload_all = False
        self._passes = SerialPasses(
            f"broker-{broker_id}-config-changes", self._process, (CoordinationError, KafkaError)
        )

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Set the watch and skip the notifications already there (rule 1)."""
        self._passes.running = True
        self._passes.listen(self._zk, lambda: self._zk)
        children = await self._zk.get_children(zk_data.CONFIG_CHANGES, self._passes.on_watch)
        self.last_executed = max((zk_data.config_change_sequence(c) for c in children), default=-1)

    def replace_coordination(self, coordination: Coordination) -> None:
        """A new ZooKeeper session: watch through it, and reload everything (rule 3)."""
        self._zk = coordination
        self._passes.listen(coordination, lambda: self._zk)
        self._schedule(reload_all=True)

    async def stop(self) -> None:
        await self._passes.stop()

    async def wait_idle(self) -> None:
        """Until no pass is running or pending (for tests)."""
        await self._passes.wait_idle()

    def _schedule(self, *, reload_all: bool = False) -> None:
        self._reload_all = self._reload_all or reload_all
        self._passes.request()

    # -- processing -------------------------------------------------------------------------

    async def _process(self) -> None:
        children = await self._zk.get_children(zk_data.CONFIG_CHANGES, self._passes.on_watch)
        sequences = {zk_data.config_change_sequence(c) for c in children}
        if self.last_executed >= 0 and self.last_executed not in sequences:
            self._reload_all = True  # purged past what we handled: something may be missed
        if self._reload_all:
            self._reload_all = False
            await load_dynamic_config(self._zk, self._broker_config)
            await self.reload_all_topics()
            if self._scram_credentials is not None:
                await self._scram_credentials.load_all(self._zk)
        pending = sorted(
            (seq, child)
            for child in children
            if (seq := zk_data.config_change_sequence(child)) > self.last_executed
        )
        for seq, child in pending:
            try:
                data, _ = await self._zk.get(f"{zk_data.CONFIG_CHANGES}/{child}")
            except NoNodeError:
                # Purged before we read it: which entity changed is unknown (rule 3).
                await self.reload_all_topics()
                if self._scram_credentials is not None:
                    await self._scram_credentials.load_all(self._zk)
                self.last_executed = seq
                continue
            try:
                entity_type, name = zk_data.decode_config_change(data)
            except (ValueError, KeyError, TypeError) as e:
                logger.error("broker %d: ignoring notification %s: %s", self.broker_id, child, e)
                self.last_executed = seq
                continue
            if entity_type == TOPICS_ENTITY:
                await self.reload_topic(name)
            elif entity_type == zk_data.USERS_ENTITY and self._scram_credentials is not None:
                await self._scram_credentials.reload(self._zk, zk_data.desanitize_user(name))
            elif entity_type == BROKERS_ENTITY:
                if name in (zk_data.BROKER_DEFAULT_ENTITY, str(self.broker_id)) and (
                    await load_dynamic_config(self._zk, self._broker_config)
                ):
                    await self.reload_all_topics()
            else:
                logger.info(
                    "broker %d: ignoring a config change of %s/%s (topics, brokers and users only)",
                    self.broker_id,
                    entity_type,
                    name,
                )
            self.last_executed = seq

    async def reload_all_topics(self) -> None:
        for topic in sorted(self._topic_configs):
            await self.reload_topic(topic)

    async def reload_topic(self, topic: str) -> None:
        """Read the topic's overrides and apply them to its cached config and live logs."""
        try:
            data, _ = await self._zk.get(zk_data.topic_config_path(topic))
        except NoNodeError:
            self._topic_configs.pop(topic, None)  # deleted meanwhile
            return
        try:
            overrides = zk_data.decode_topic_config(data)
            config = self._broker_config.log_config(overrides)
        except (ValueError, KafkaError) as e:
            logger.error(
                "broker %d: keeping the config of topic %s: its overrides do not parse: %s",
                self.broker_id,
                topic,
                e,
            )
            return
        if self._topic_configs.get(topic) == config:
            return
        self._topic_configs[topic] = config
        logs = [log for tp, log in self._log_manager.logs.items() if tp.topic == topic]
        for log in logs:
            log.update_config(config)
        self.changes_applied += 1
        logger.info(
            "broker %d: processing override for entityPath: topics/%s with config: %s "
            "(%d local logs)",
            self.broker_id,
            topic,
            overrides,
            len(logs),
        )
