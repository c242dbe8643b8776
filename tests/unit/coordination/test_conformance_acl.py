"""ZooKeeper ACLs through the Coordination port: every case runs against SimZooKeeper and a real
ZooKeeper (digest authentication, per-znode ACL lists, NoAuth), so the twin cannot drift."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from kafkasim.common.coordination import (
    CheckOp,
    CreateOp,
    InvalidACLError,
    NoAuthError,
    NoNodeError,
    SetOp,
)
from kafkasim.common.zk_acl import (
    CREATOR_ALL_ACL,
    DIGEST,
    READ_ACL_UNSAFE,
    Acl,
    Perm,
    ZkAuth,
    ZkSecurity,
    digest_id,
)
from tests.unit.coordination.harness import Env

Run = Callable[[Callable[[Env], Awaitable[None]]], None]

ALICE = ZkAuth(DIGEST, "alice:alice-secret")
BOB = ZkAuth(DIGEST, "bob:bob-secret")
PUBLIC = ZkSecurity(ALICE, lambda _path: (*CREATOR_ALL_ACL, *READ_ACL_UNSAFE))
PRIVATE = ZkSecurity(ALICE, lambda _path: CREATOR_ALL_ACL)


def test_digest_id_is_zookeepers() -> None:
    """DigestAuthenticationProvider.generateDigest("super:test") is a documented value."""
    assert digest_id("super:test") == "super:D/InIHSb7yEEbrWz8b9l71RjZJU="


def test_creator_all_world_read_lets_anyone_read_and_only_the_creator_write(
    run_scenario: Run,
) -> None:
    async def scenario(env: Env) -> None:
        owner = await env.client(security=PUBLIC)
        node, child = env.path("node"), env.path("node", "child")
        await owner.create(node, b"v0")
        await owner.create(child, b"c")
        assert await owner.get_acls(node) == [
            Acl(Perm.ALL, DIGEST, digest_id(ALICE.credential)),
            Acl(Perm.READ, "world", "anyone"),
        ]
        anonymous = await env.client()
        assert (await anonymous.get(node))[0] == b"v0"
        assert await anonymous.get_children(node) == ["child"]
        with pytest.raises(NoAuthError):
            await anonymous.set(node, b"forged")
        with pytest.raises(NoAuthError):
            await anonymous.delete(child)
        with pytest.raises(NoAuthError):
            await anonymous.create(env.path("node", "intruder"))
        with pytest.raises(NoAuthError):  # refused before it is found to exist
            await anonymous.create(child)
        with pytest.raises(NoAuthError):  # refused before it is found missing
            await anonymous.delete(env.path("node", "missing"))
        stranger = await env.client(security=ZkSecurity(BOB))
        with pytest.raises(NoAuthError):
            await stranger.set(node, b"forged")
        # All or nothing: the open create before the refused set is not applied.
        with pytest.raises(NoAuthError):
            await anonymous.multi([CreateOp(env.path("open")), SetOp(node, b"forged")])
        assert await anonymous.exists(env.path("open")) is None
        assert (await owner.get(node))[0] == b"v0"
        assert await owner.get_children(node) == ["child"]
        # The same identity in another session (another broker) has every right.
        again = await env.client(security=PUBLIC)
        await again.set(node, b"v1")
        await again.delete(child)
        assert (await anonymous.get(node))[0] == b"v1"

    run_scenario(scenario)


def test_creator_only_nodes_cannot_be_read_by_others(run_scenario: Run) -> None:
    async def scenario(env: Env) -> None:
        owner = await env.client(security=PRIVATE)
        node = env.path("secret")
        await owner.create(env.path("secret", "c"), b"s", makepath=True)
        for client in (await env.client(), await env.client(security=ZkSecurity(BOB))):
            with pytest.raises(NoAuthError):
                await client.get(node)
            with pytest.raises(NoAuthError):
                await client.get_children(node)
            with pytest.raises(NoAuthError):
                await client.multi([CheckOp(node, 0)])
            stat = await client.exists(node)  # exists needs no permission
            assert stat is not None and stat.num_children == 1
        assert (await owner.get(env.path("secret", "c")))[0] == b"s"
        await owner.multi([CheckOp(node, 0)])

    run_scenario(scenario)


def test_makepath_gives_each_ancestor_its_own_paths_acls(run_scenario: Run) -> None:
    """Kafka's createRecursive: /config stays world-readable when /config/users/x is made."""

    def policy(path: str) -> tuple[Acl, ...]:
        return CREATOR_ALL_ACL if "/users" in path else (*CREATOR_ALL_ACL, *READ_ACL_UNSAFE)

    async def scenario(env: Env) -> None:
        owner = await env.client(security=ZkSecurity(ALICE, policy))
        await owner.create(env.path("config", "users", "x"), b"{}", makepath=True)
        anonymous = await env.client()
        assert await anonymous.get_children(env.path("config")) == ["users"]
        with pytest.raises(NoAuthError):
            await anonymous.get_children(env.path("config", "users"))

    run_scenario(scenario)


def test_creator_acl_without_credentials_is_invalid(run_scenario: Run) -> None:
    async def scenario(env: Env) -> None:
        anonymous = await env.client(security=ZkSecurity(None, lambda _path: CREATOR_ALL_ACL))
        with pytest.raises(InvalidACLError):
            await anonymous.create(env.path("x"))
        with pytest.raises(InvalidACLError):  # the ACL is checked before the parent
            await anonymous.create(env.path("missing", "x"))
        with pytest.raises(NoNodeError):
            await anonymous.get(env.path("x"))

    run_scenario(scenario)
