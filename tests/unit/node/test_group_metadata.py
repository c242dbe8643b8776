"""The group's pure bookkeeping: protocol choice, membership, and the value it stores."""

from __future__ import annotations

from kafkasim.node.group_metadata import Group, Member
from kafkasim.node.group_types import GroupProtocol, GroupState


def member(member_id: str, *protocols: str) -> Member:
    return Member(
        member_id=member_id,
        client_id="c",
        client_host="/h",
        session_timeout_ms=6000,
        rebalance_timeout_ms=9000,
        protocol_type="consumer",
        protocols=tuple(GroupProtocol(p, p.encode()) for p in protocols),
    )


def test_the_protocol_most_members_prefer_among_those_all_support_wins() -> None:
    group = Group("g")
    group.add_member(member("a", "roundrobin", "range"))
    group.add_member(member("b", "range", "roundrobin"))
    group.add_member(member("c", "range", "roundrobin", "sticky"))
    assert group.candidate_protocols() == {"range", "roundrobin"}
    assert group.select_protocol() == "range"


def test_a_tie_goes_to_the_earliest_members_choice() -> None:
    group = Group("g")
    group.add_member(member("a", "roundrobin", "range"))
    group.add_member(member("b", "range", "roundrobin"))
    assert group.select_protocol() == "roundrobin"


def test_a_joiner_must_share_a_protocol_and_the_type() -> None:
    group = Group("g")
    assert not group.supports_protocols("consumer", ())
    assert group.supports_protocols("consumer", (GroupProtocol("range", b""),))
    group.add_member(member("a", "range"))
    assert group.supports_protocols(
        "consumer", (GroupProtocol("x", b""), GroupProtocol("range", b""))
    )
    assert not group.supports_protocols("consumer", (GroupProtocol("roundrobin", b""),))
    assert not group.supports_protocols("connect", (GroupProtocol("range", b""),))


def test_the_leader_moves_to_the_next_member_when_it_leaves() -> None:
    group = Group("g")
    group.add_member(member("a", "range"))
    group.add_member(member("b", "range"))
    assert group.leader_id == "a"
    group.remove_member("a")
    assert group.leader_id == "b"
    group.remove_member("b")
    assert group.leader_id is None
    assert group.remove_member("nobody") is None


def test_a_stored_group_loads_back_stable_with_fresh_sessions() -> None:
    group = Group("g", generation=4, protocol="range")
    group.add_member(member("a", "range"))
    group.members["a"].assignment = b"assigned"
    group.protocol_type = "consumer"
    value = group.to_value(now_ms=1234)
    assert (value.generation, value.protocol, value.leader) == (4, "range", "a")
    assert value.members[0].subscription == b"range"
    loaded = Group.from_value("g", value, now_ms=100)
    assert loaded.state is GroupState.STABLE
    assert loaded.members["a"].assignment == b"assigned"
    assert loaded.members["a"].heartbeat_deadline_ms == 100 + 6000
    empty = Group.from_value("g", Group("g", generation=5).to_value(now_ms=1), now_ms=1)
    assert empty.state is GroupState.EMPTY and empty.generation == 5
