"""The ZooKeeper-backed ACL authorizer on SimZooKeeper (virtual time): Kafka's znodes and JSON,
version-checked writes under contention, change notifications reaching another broker's cache,
purged notifications, bad data, and a new session.

Why: ACLs written through one broker (or the ``acls`` tool) must reach every broker's cache,
two writers must not lose each other's ACLs, and bad data must neither stop the broker nor be
overwritten.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from kafkasim.common.errors import InvalidConfigError
from kafkasim.node import acl_authorizer, acl_zk
from kafkasim.node.acl import (
    ANY_BINDING,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafkasim.node.acl_authorizer import AclAuthorizer, AclStorageError, acl_authorizer_for
from kafkasim.node.config import BrokerConfig
from kafkasim.sim.loop import run_simulation
from kafkasim.sim.zookeeper import SimZooKeeperClient, SimZooKeeperServer

ALICE = "User:alice"
T = ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL)
P = ResourcePattern(ResourceType.TOPIC, "ord", PatternType.PREFIXED)
READ = AccessControlEntry(ALICE, "*", AclOperation.READ, AclPermissionType.ALLOW)
WRITE = AccessControlEntry(ALICE, "*", AclOperation.WRITE, AclPermissionType.ALLOW)
WRITE_BOB = AccessControlEntry("User:bob", "*", AclOperation.WRITE, AclPermissionType.ALLOW)


class Bench:
    def __init__(self) -> None:
        self.server = SimZooKeeperServer()
        self.zk1 = SimZooKeeperClient(self.server, 6_000, "broker-1")
        self.zk2 = SimZooKeeperClient(self.server, 6_000, "broker-2")
        self.a1 = AclAuthorizer(self.zk1, name="broker-1")
        self.a2 = AclAuthorizer(self.zk2, name="broker-2")

    async def start(self) -> None:
        await self.zk1.start()
        await self.zk2.start()
        await self.a1.start()
        await self.a2.start()

    async def settle(self) -> None:
        for _ in range(5):
            await self.a1.wait_idle()
            await self.a2.wait_idle()
            await self.zk2.get_children("/")  # a round trip: pending watch events arrive

    async def stop(self) -> None:
        await self.a1.stop()
        await self.a2.stop()
        await self.zk1.close()
        await self.zk2.close()


def run(scenario: Callable[[Bench], Awaitable[None]]) -> None:
    async def main() -> None:
        bench = Bench()
        await bench.start()
        try:
            await scenario(bench)
        finally:
            await bench.stop()

    run_simulation(main(), time_limit_s=600)


def test_acls_are_stored_as_kafka_stores_them_with_notifications() -> None:
    async def scenario(b: Bench) -> None:
        assert await b.a1.create_acls([AclBinding(T, READ), AclBinding(P, WRITE)]) == [None] * 2
        data, _ = await b.zk1.get("/kafka-acl/Topic/orders")
        assert json.loads(data) == {
            "version": 1,
            "acls": [
                {"principal": ALICE, "permissionType": "Allow", "operation": "Read", "host": "*"}
            ],
        }
        data, _ = await b.zk1.get("/kafka-acl-extended/prefixed/Topic/ord")
        assert json.loads(data)["acls"][0]["operation"] == "Write"
        literal = await b.zk1.get_children("/kafka-acl-changes")
        assert literal == ["acl_changes_0000000000"]
        payload, _ = await b.zk1.get(f"/kafka-acl-changes/{literal[0]}")
        assert payload == b"TOPIC:orders"
        (extended,) = await b.zk1.get_children("/kafka-acl-extended-changes")
        payload, _ = await b.zk1.get(f"/kafka-acl-extended-changes/{extended}")
        assert json.loads(payload) == {
            "version": 1,
            "resourceType": "TOPIC",
            "name": "ord",
            "patternType": "PREFIXED",
        }
        for rtype in ("Topic", "Group", "Cluster", "TransactionalId", "DelegationToken"):
            assert await b.zk1.exists(f"/kafka-acl/{rtype}") is not None

    run(scenario)


def test_another_brokers_cache_follows_the_notifications() -> None:
    async def scenario(b: Bench) -> None:
        assert not b.a2.authorize(ALICE, "1.2.3.4", AclOperation.READ, T)
        await b.a1.create_acls([AclBinding(T, READ), AclBinding(P, WRITE)])
        await b.settle()
        assert b.a2.authorize(ALICE, "1.2.3.4", AclOperation.READ, T)
        assert b.a2.authorize(ALICE, "1.2.3.4", AclOperation.WRITE, T)  # via the prefix
        assert b.a2.acls(ANY_BINDING) == b.a1.acls(ANY_BINDING)
        deleted = await b.a1.delete_acls([ANY_BINDING])
        assert [d.binding for d in deleted[0]] == [AclBinding(P, WRITE), AclBinding(T, READ)]
        assert all(d.error is None for d in deleted[0])
        await b.settle()
        assert b.a2.acls(ANY_BINDING) == []
        assert await b.zk1.exists("/kafka-acl/Topic/orders") is None  # no ACL: no znode
        assert b.a2.notifications_processed == 4

    run(scenario)


def test_a_starting_broker_loads_everything_already_stored() -> None:
    async def scenario(b: Bench) -> None:
        await b.a1.create_acls([AclBinding(T, READ), AclBinding(P, WRITE)])
        late = AclAuthorizer(b.zk2, name="late")
        await late.start()
        try:
            assert late.acls(ANY_BINDING) == b.a1.acls(ANY_BINDING)
            assert late.last_executed == {acl_zk.LITERAL_CHANGES: 0, acl_zk.EXTENDED_CHANGES: 0}
        finally:
            await late.stop()

    run(scenario)


def test_concurrent_writers_lose_nothing() -> None:
    """Another writer changes the znode between broker-2's read and its write: the version
    check fails, broker-2 re-reads and re-applies, so both ACLs are stored."""

    async def scenario(b: Bench) -> None:
        await b.a1.create_acls([AclBinding(T, READ)])
        real_get = b.a2._zk.get
        interleaved: list[str] = []

        async def get_then_race(path: str, watch: Any = None) -> Any:
            answer = await real_get(path, watch)
            if path == "/kafka-acl/Topic/orders" and not interleaved:
                interleaved.append(path)
                await b.a1.create_acls([AclBinding(P, WRITE), AclBinding(T, WRITE_BOB)])
            return answer

        b.a2._zk.get = get_then_race  # type: ignore[method-assign]
        assert await b.a2.create_acls([AclBinding(T, WRITE)]) == [None]
        await b.settle()
        assert interleaved
        assert b.a1.cache.get(T) == {READ, WRITE, WRITE_BOB} == b.a2.cache.get(T)

    run(scenario)


def test_a_write_from_a_stale_cache_is_retried_against_zookeeper() -> None:
    async def scenario(b: Bench) -> None:
        await b.a1.create_acls([AclBinding(T, READ)])
        await b.settle()
        await b.a2.stop()  # broker-2 stops listening: its cache goes stale
        await b.a1.create_acls([AclBinding(T, WRITE)])
        await b.a2.delete_acls(
            [
                AclBindingFilter(
                    ResourcePatternFilter(ResourceType.TOPIC, "orders", PatternType.LITERAL),
                    AccessControlEntryFilter(None, None, AclOperation.READ, AclPermissionType.ANY),
                )
            ]
        )
        data, _ = await b.zk1.get("/kafka-acl/Topic/orders")
        assert acl_zk.decode_acls(data) == {WRITE}

    run(scenario)


def test_bad_data_is_skipped_at_load_kept_on_refresh_and_never_overwritten() -> None:
    async def scenario(b: Bench) -> None:
        await b.a1.create_acls([AclBinding(T, READ)])
        await b.settle()
        await b.zk1.set("/kafka-acl/Topic/orders", b"{garbage")
        await b.zk1.create("/kafka-acl-changes/acl_changes_", b"TOPIC:orders", sequence=True)
        await b.zk1.create("/kafka-acl-changes/acl_changes_", b"no separator", sequence=True)
        await b.settle()
        assert b.a2.cache.get(T) == {READ}  # kept
        (error,) = await b.a2.create_acls([AclBinding(T, WRITE)])
        assert isinstance(error, AclStorageError)
        assert await b.zk1.get("/kafka-acl/Topic/orders") is not None
        data, _ = await b.zk1.get("/kafka-acl/Topic/orders")
        assert data == b"{garbage"
        await b.a2.load_all()
        assert b.a2.cache.get(T) == frozenset()  # skipped at load

    run(scenario)


def test_purged_notifications_make_a_full_reload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(acl_authorizer, "ACL_CHANGES_RETAINED", 2)

    async def scenario(b: Bench) -> None:
        await b.a2.stop()  # broker-2 falls behind
        b.a2._passes.running = True  # listening again only when told (below)
        for i in range(4):
            pattern = ResourcePattern(ResourceType.GROUP, f"g{i}", PatternType.LITERAL)
            await b.a1.create_acls([AclBinding(pattern, READ)])
        assert len(await b.zk1.get_children("/kafka-acl-changes")) == 2
        b.a2._schedule()
        await b.settle()
        assert len(b.a2.acls(ANY_BINDING)) == 4

    run(scenario)


def test_a_new_session_reloads_everything() -> None:
    async def scenario(b: Bench) -> None:
        await b.a1.create_acls([AclBinding(T, READ)])
        await b.settle()
        await b.zk2.close()
        await b.a1.create_acls([AclBinding(P, WRITE)])
        fresh = SimZooKeeperClient(b.server, 6_000, "broker-2b")
        await fresh.start()
        b.a2.replace_coordination(fresh)
        b.zk2 = fresh
        await b.settle()
        assert b.a2.cache.get(P) == {WRITE}

    run(scenario)


def test_names_with_a_slash_are_refused_before_anything_is_written() -> None:
    async def scenario(b: Bench) -> None:
        group = ResourcePattern(ResourceType.GROUP, "a/b", PatternType.LITERAL)
        (error,) = await b.a1.create_acls([AclBinding(group, READ)])
        assert isinstance(error, ValueError)
        assert await b.zk1.get_children("/kafka-acl/Group") == []

    run(scenario)


# -- the broker's config ----------------------------------------------------------------------


def _config(**extra: object) -> BrokerConfig:
    props: dict[str, object] = {"broker.id": 1, "log.dirs": "/tmp/x", "zookeeper.connect": "sim"}
    props.update({k.replace("_", "."): v for k, v in extra.items()})
    return BrokerConfig.from_props(props)


def test_no_authorizer_unless_configured() -> None:
    assert acl_authorizer_for(_config(), SimZooKeeperClient(SimZooKeeperServer(), 6_000)) is None


@pytest.mark.parametrize(
    "name", ["kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer"]
)
def test_kafkas_acl_authorizer_names_build_it(name: str) -> None:
    config = _config(
        authorizer_class_name=name,
        super_users="User:admin;User:ops",
        allow_everyone_if_no_acl_found="true",
    )
    authorizer = acl_authorizer_for(config, SimZooKeeperClient(SimZooKeeperServer(), 6_000))
    assert authorizer is not None
    assert authorizer.cache.super_users == {"User:admin", "User:ops"}
    assert authorizer.cache.allow_if_no_acls


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"authorizer_class_name": "com.example.Mine"}, "authorizer.class.name"),
        ({"super_users": "admin"}, "configuration super.users"),
    ],
)
def test_bad_authorizer_config_is_invalid_config_naming_the_key(
    extra: dict[str, str], message: str
) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        _config(**extra)
