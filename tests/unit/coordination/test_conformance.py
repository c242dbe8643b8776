"""The Coordination port's conformance suite: every case runs against SimZooKeeper (on asyncio's
loop and on the virtual-time loop) and against a real ZooKeeper through KazooCoordination, so
the simulation can only pass what the real thing does."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable

import pytest

from kafkasim.common.coordination import (
    BadVersionError,
    CheckOp,
    CoordinationError,
    CreateOp,
    DeleteOp,
    EventType,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    SessionExpiredError,
    SessionState,
    SetOp,
    WatchEvent,
)
from tests.unit.coordination.harness import Env, Recorder, expire_session, round_trip

Run = Callable[[Callable[[Env], Awaitable[None]]], None]


# -- nodes, data, versions ---------------------------------------------------------------------


def test_create_get_set_round_trip_with_versions(run_scenario: Run) -> None:
    """The basic read/write cycle: versions start at 0 and count writes; zxids order them."""

    async def scenario(env: Env) -> None:
        zk = await env.client()
        path = env.path("node")
        assert await zk.create(path, b"v0") == path
        data, stat = await zk.get(path)
        assert data == b"v0"
        assert (stat.version, stat.ephemeral_owner, stat.num_children) == (0, 0, 0)
        assert stat.czxid == stat.mzxid
        written = await zk.set(path, b"v1", version=0)
        assert written.version == 1
        assert written.mzxid > stat.mzxid
        assert written.czxid == stat.czxid
        data, stat = await zk.get(path)
        assert (data, stat.version) == (b"v1", 1)
        assert (await zk.set(path, b"v2")).version == 2  # -1: any version
        found = await zk.exists(path)
        assert found is not None and found.version == 2

    run_scenario(scenario)


def test_czxid_grows_with_every_create(run_scenario: Run) -> None:
    """Kafka uses the czxid of a broker's znode as its epoch: a later create must be larger."""

    async def scenario(env: Env) -> None:
        zk = await env.client()
        await zk.create(env.path("a"))
        await zk.create(env.path("b"))
        first = await zk.exists(env.path("a"))
        second = await zk.exists(env.path("b"))
        assert first is not None and second is not None
        assert second.czxid > first.czxid

    run_scenario(scenario)


def test_failed_writes_and_session_changes_take_a_zxid_but_reads_do_not(
    run_scenario: Run,
) -> None:
    """ZooKeeper logs a failed write as an error transaction; SimZooKeeper counts the same."""

    async def scenario(env: Env) -> None:
        zk = await env.client()

        async def czxid_of_new_node(name: str) -> int:
            await zk.create(env.path(name))
            stat = await zk.exists(env.path(name))
            assert stat is not None
            return stat.czxid

        first = await czxid_of_new_node("a")
        with pytest.raises(NodeExistsError):
            await zk.create(env.path("a"))
        with pytest.raises(BadVersionError):
            await zk.set(env.path("a"), b"x", version=9)
        with pytest.raises(BadVersionError):
            await zk.multi([CreateOp(env.path("m")), CheckOp(env.path("a"), 9)])
        await zk.get(env.path("a"))
        await zk.get_children(env.root)
        assert await czxid_of_new_node("b") == first + 4
        other = await env.client()  # createSession ...
        await other.close()  # ... and closeSession are transactions
        assert await czxid_of_new_node("c") == first + 7

    run_scenario(scenario)


def test_create_existing_node_raises_node_exists(run_scenario: Run) -> None:
    async def scenario(env: Env) -> None:
        zk = await env.client()
        await zk.create(env.path("n"), b"first")
        with pytest.raises(NodeExistsError):
            await zk.create(env.path("n"), b"second")
        assert (await zk.get(env.path("n")))[0] == b"first"

    run_scenario(scenario)


def test_missing_parent_raises_no_node_unless_makepath(run_scenario: Run) -> None:
    async def scenario(env: Env) -> None:
        zk = await env.client()
        deep = env.path("a", "b", "c")
        with pytest.raises(NoNodeError):
            await zk.create(deep)
        assert await zk.create(deep, b"x", makepath=True) == deep
        assert await zk.get_children(env.path("a")) == ["b"]

    run_scenario(scenario)


def test_missing_node_raises_no_node_and_exists_returns_none(run_scenario: Run) -> None:
    async def scenario(env: Env) -> None:
        zk = await env.client()
        missing = env.path("missing")
        assert await zk.exists(missing) is None
        for call in (
            zk.get(missing),
            zk.get_children(missing),
            zk.set(missing, b"x"),
            zk.delete(missing),
        ):
            with pytest.raises(NoNodeError):
                await call

    run_scenario(scenario)


def test_wrong_version_raises_bad_version_and_changes_nothing(run_scenario: Run) -> None:
    """Conditional writes are how racing controllers and leaders fence each other."""

    async def scenario(env: Env) -> None:
        zk = await env.client()
        path = env.path("n")
        await zk.create(path, b"v0")
        await zk.set(path, b"v1", version=0)
        with pytest.raises(BadVersionError):
            await zk.set(path, b"stale", version=0)
        with pytest.raises(BadVersionError):
            await zk.delete(path, version=0)
        data, stat = await zk.get(path)
        assert (data, stat.version) == (b"v1", 1)
        await zk.delete(path, version=1)
        assert await zk.exists(path) is None

    run_scenario(scenario)


def test_delete_of_node_with_children_raises_not_empty(run_scenario: Run) -> None:
    async def scenario(env: Env) -> None:
        zk = await env.client()
        await zk.create(env.path("p", "c", "g"), makepath=True)
        with pytest.raises(NotEmptyError):
            await zk.delete(env.path("p"))
        await zk.delete(env.path("p"), recursive=True)
        assert await zk.exists(env.path("p")) is None

    run_scenario(scenario)


def test_recursive_delete_checks_the_version_of_the_top_node(run_scenario: Run) -> None:
    async def scenario(env: Env) -> None:
        zk = await env.client()
        await zk.create(env.path("p", "c"), makepath=True)
        with pytest.raises(BadVersionError):
            await zk.delete(env.path("p"), version=5, recursive=True)
        assert await zk.exists(env.path("p", "c")) is not None
        await zk.delete(env.path("p"), version=0, recursive=True)
        assert await zk.exists(env.path("p")) is None

    run_scenario(scenario)


def test_children_are_sorted_and_counted(run_scenario: Run) -> None:
    async def scenario(env: Env) -> None:
        zk = await env.client()
        for name in ("b", "c", "a"):
            await zk.create(env.path(name))
        assert await zk.get_children(env.root) == ["a", "b", "c"]
        stat = await zk.exists(env.root)
        assert stat is not None
        assert (stat.num_children, stat.cversion) == (3, 3)
        assert "zookeeper" in await zk.get_children("/")  # the server's own namespace

    run_scenario(scenario)


def test_invalid_paths_raise_value_error(run_scenario: Run) -> None:
    """kazoo would quietly rewrite these; the port refuses them, like ZooKeeper's Java client."""

    async def scenario(env: Env) -> None:
        zk = await env.client()
        for bad in ("relative", env.path("trailing") + "/", env.root + "//x", env.path("."), ""):
            with pytest.raises(ValueError):
                await zk.create(bad)
        with pytest.raises(ValueError):
            await zk.get("no-slash")
        with pytest.raises(ValueError):
            await zk.delete("/")

    run_scenario(scenario)


def test_ephemeral_node_cannot_have_children(run_scenario: Run) -> None:
    async def scenario(env: Env) -> None:
        zk = await env.client()
        await zk.create(env.path("e"), ephemeral=True)
        with pytest.raises(CoordinationError, match="NoChildrenForEphemerals") as raised:
            await zk.create(env.path("e", "child"))
        assert not isinstance(raised.value, NoNodeError | NodeExistsError)

    run_scenario(scenario)


# -- sequential nodes ----------------------------------------------------------------------


def test_sequential_suffix_counts_child_creations(run_scenario: Run) -> None:
    """The suffix is the number of children ever created under the parent (deletions do not
    count), ten digits; the Stat's cversion counts creations and deletions."""

    async def scenario(env: Env) -> None:
        zk = await env.client()
        parent = env.path("seq")
        await zk.create(parent)
        assert await zk.create(f"{parent}/n-", sequence=True) == f"{parent}/n-0000000000"
        await zk.create(f"{parent}/plain")
        await zk.delete(f"{parent}/plain")
        stat = await zk.exists(parent)
        assert stat is not None and (stat.cversion, stat.num_children) == (3, 1)
        assert await zk.create(f"{parent}/n-", sequence=True) == f"{parent}/n-0000000002"
        assert await zk.create(f"{parent}/", sequence=True) == f"{parent}/0000000003"
        ephemeral = await zk.create(f"{parent}/e-", ephemeral=True, sequence=True)
        assert ephemeral == f"{parent}/e-0000000004"
        stat = await zk.exists(ephemeral)
        assert stat is not None and stat.ephemeral_owner == zk.session_id
        await zk.multi([DeleteOp(ephemeral), CreateOp(f"{parent}/m-", sequence=True)])
        assert await zk.get_children(parent) == [
            "0000000003",
            "m-0000000005",
            "n-0000000000",
            "n-0000000002",
        ]

    run_scenario(scenario)


# -- sessions and ephemeral nodes ----------------------------------------------------------


def test_ephemeral_node_goes_when_its_session_closes(run_scenario: Run) -> None:
    """A closed broker's registration disappears at once, and watchers are told."""

    async def scenario(env: Env) -> None:
        owner = await env.client()
        observer = await env.client()
        path = env.path("broker")
        await owner.create(path, b"me", ephemeral=True)
        stat = await observer.exists(path)
        assert stat is not None and stat.ephemeral_owner == owner.session_id != 0
        seen = Recorder()
        await observer.get(path, seen)
        await owner.close()
        assert await seen.wait_for(1) == [WatchEvent(EventType.DELETED, path)]
        assert await observer.exists(path) is None

    run_scenario(scenario)


def test_ephemeral_node_goes_when_its_session_expires(run_scenario: Run) -> None:
    async def scenario(env: Env) -> None:
        owner = await env.client()
        observer = await env.client()
        path = env.path("broker")
        await owner.create(path, ephemeral=True)
        seen = Recorder()
        assert await observer.exists(path, seen) is not None
        await expire_session(owner)
        assert await seen.wait_for(1) == [WatchEvent(EventType.DELETED, path)]
        assert await observer.exists(path) is None

    run_scenario(scenario)


def test_session_listener_sees_connected_then_expired(run_scenario: Run) -> None:
    """After expiry the session is gone for good: every call raises SessionExpiredError."""

    async def scenario(env: Env) -> None:
        zk = await env.client(start=False)
        states = Recorder()
        zk.add_session_listener(states)
        await zk.start()
        assert states.calls == [SessionState.CONNECTED]
        session_id = zk.session_id
        await zk.create(env.path("e"), ephemeral=True)
        await expire_session(zk)
        assert states.calls[0] is SessionState.CONNECTED
        assert states.calls[-1] is SessionState.EXPIRED
        # The server drops an expired session's connection first: SUSPENDED may come between.
        assert set(states.calls[1:-1]) <= {SessionState.SUSPENDED}
        with pytest.raises(SessionExpiredError):
            await zk.get(env.root)
        with pytest.raises(SessionExpiredError):
            await zk.create(env.path("again"))
        assert zk.session_id == session_id
        observer = await env.client()
        assert await observer.exists(env.path("e")) is None
        assert await observer.exists(env.path("again")) is None

    run_scenario(scenario)


def test_calls_after_close_raise_session_expired(run_scenario: Run) -> None:
    async def scenario(env: Env) -> None:
        zk = await env.client()
        await zk.close()
        await zk.close()  # idempotent
        with pytest.raises(SessionExpiredError):
            await zk.exists(env.root)

    run_scenario(scenario)


# -- watches -------------------------------------------------------------------------------


def test_data_watch_fires_once(run_scenario: Run) -> None:
    """Watches are one-shot: the second change is not reported until the watch is set again."""

    async def scenario(env: Env) -> None:
        zk = await env.client()
        path = env.path("n")
        await zk.create(path, b"0")
        seen = Recorder()
        await zk.get(path, seen)
        await zk.set(path, b"1")
        await zk.set(path, b"2")
        await round_trip(zk)
        assert seen.calls == [WatchEvent(EventType.CHANGED, path)]
        await zk.exists(path, seen)
        await zk.delete(path)
        await round_trip(zk)
        assert seen.calls[1:] == [WatchEvent(EventType.DELETED, path)]

    run_scenario(scenario)


def test_exists_watch_on_missing_node_fires_created(run_scenario: Run) -> None:
    async def scenario(env: Env) -> None:
        watcher = await env.client()
        writer = await env.client()
        path = env.path("later")
        seen = Recorder()
        assert await watcher.exists(path, seen) is None
        await writer.create(path)
        assert await seen.wait_for(1) == [WatchEvent(EventType.CREATED, path)]

    run_scenario(scenario)


def test_failed_get_sets_no_watch(run_scenario: Run) -> None:
    """Only exists() watches a missing node; get() and get_children() fail without a watch."""

    async def scenario(env: Env) -> None:
        zk = await env.client()
        path = env.path("n")
        seen = Recorder()
        with pytest.raises(NoNodeError):
            await zk.get(path, seen)
        with pytest.raises(NoNodeError):
            await zk.get_children(path, seen)
        await zk.create(path)
        await zk.create(env.path("n", "c"))
        await round_trip(zk)
        assert seen.calls == []

    run_scenario(scenario)


def test_child_watch_fires_child_on_create_and_delete(run_scenario: Run) -> None:
    async def scenario(env: Env) -> None:
        watcher = await env.client()
        writer = await env.client()
        parent = env.path("ids")
        await writer.create(parent)
        seen = Recorder()
        assert await watcher.get_children(parent, seen) == []
        await writer.create(f"{parent}/1", ephemeral=True)
        assert await seen.wait_for(1) == [WatchEvent(EventType.CHILD, parent)]
        assert await watcher.get_children(parent, seen) == ["1"]
        await writer.close()  # the ephemeral child goes with the session
        await seen.wait_for(2)
        assert seen.calls[1] == WatchEvent(EventType.CHILD, parent)
        assert await watcher.get_children(parent) == []

    run_scenario(scenario)


def test_deleting_a_watched_parent_fires_deleted_for_its_child_watch(run_scenario: Run) -> None:
    async def scenario(env: Env) -> None:
        zk = await env.client()
        parent = env.path("p")
        await zk.create(parent)
        seen = Recorder()
        await zk.get_children(parent, seen)
        await zk.delete(parent)
        await round_trip(zk)
        assert seen.calls == [WatchEvent(EventType.DELETED, parent)]

    run_scenario(scenario)


def test_a_watcher_set_twice_on_one_path_fires_once(run_scenario: Run) -> None:
    """As in ZooKeeper's Java client: one call per distinct watcher and event."""

    async def scenario(env: Env) -> None:
        zk = await env.client()
        path = env.path("n")
        await zk.create(path)
        seen, other = Recorder(), Recorder()
        await zk.get(path, seen)
        await zk.exists(path, seen)
        await zk.get_children(path, seen)
        await zk.exists(path, other)
        await zk.delete(path)
        await round_trip(zk)
        assert seen.calls == [WatchEvent(EventType.DELETED, path)]
        assert other.calls == [WatchEvent(EventType.DELETED, path)]

    run_scenario(scenario)


def test_watch_event_arrives_before_the_new_data(run_scenario: Run) -> None:
    """ZooKeeper's ordering guarantee: a client that reads the new value has already been
    told about the change, so a watch-then-read loop never misses an update."""

    async def scenario(env: Env) -> None:
        reader = await env.client()
        writer = await env.client()
        path = env.path("n")
        await writer.create(path, b"old")
        order: list[str] = []
        await reader.get(path, lambda event: order.append(f"event:{event.type.value}"))

        # The reader polls while the write is in flight (no sleeps: on virtual time a
        # zero-latency poll loop would never let a timer fire).
        writing = asyncio.create_task(writer.set(path, b"new"))
        for _ in range(100_000):
            data, _ = await reader.get(path)
            if data == b"new":
                order.append("data:new")
                break
        await writing
        assert order == ["event:CHANGED", "data:new"]

    run_scenario(scenario)


# -- multi ---------------------------------------------------------------------------------


def test_multi_applies_all_ops_in_one_transaction(run_scenario: Run) -> None:
    async def scenario(env: Env) -> None:
        zk = await env.client()
        a, b = env.path("a"), env.path("b")
        await zk.create(a, b"a0")
        results = await zk.multi(
            [
                CheckOp(a, 0),
                SetOp(a, b"a1", 0),
                CreateOp(b, b"b0"),
                CreateOp(f"{b}/s-", sequence=True),
                CreateOp(f"{b}/e", ephemeral=True),
                DeleteOp(f"{b}/e"),
            ]
        )
        assert results[0] is None
        assert results[1] is not None and not isinstance(results[1], str)
        assert results[1].version == 1
        assert results[2:] == [b, f"{b}/s-0000000000", f"{b}/e", None]
        assert (await zk.get(a))[0] == b"a1"
        created = await zk.exists(b)
        child = await zk.exists(f"{b}/s-0000000000")
        assert created is not None and child is not None
        assert created.czxid == child.czxid  # one transaction, one zxid
        assert await zk.get_children(b) == ["s-0000000000"]
        assert await zk.multi([]) == []

    run_scenario(scenario)


@pytest.mark.parametrize(
    ("failing", "error"),
    [
        (CheckOp("/a", 7), BadVersionError),
        (SetOp("/a", b"x", 3), BadVersionError),
        (CreateOp("/a"), NodeExistsError),
        (DeleteOp("/missing"), NoNodeError),
        (CreateOp("/missing/child"), NoNodeError),
    ],
    ids=["check", "set", "create", "delete", "create-no-parent"],
)
def test_multi_with_a_failing_op_applies_nothing(
    run_scenario: Run, failing: CheckOp | SetOp | CreateOp | DeleteOp, error: type[Exception]
) -> None:
    """All or nothing: the first failing op's error, no change, no watch fired."""

    async def scenario(env: Env) -> None:
        zk = await env.client()
        a, fresh = env.path("a"), env.path("fresh")
        await zk.create(a, b"a0")
        seen = Recorder()
        await zk.exists(fresh, seen)
        await zk.get(a, seen)
        bad = dataclasses.replace(failing, path=env.root + failing.path)
        with pytest.raises(error):
            await zk.multi([CreateOp(fresh), SetOp(a, b"a1"), bad, DeleteOp(a)])
        assert await zk.exists(fresh) is None
        data, stat = await zk.get(a)
        assert (data, stat.version) == (b"a0", 0)
        await round_trip(zk)
        assert seen.calls == []

    run_scenario(scenario)
