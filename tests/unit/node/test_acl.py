"""The authorizer's pure decision (``node.acl``) against Kafka's AclAuthorizer rules: which ACLs
match a resource (literal, wildcard, prefixed), DENY over ALLOW, implied operations, super
users, the no-ACL rule, hosts and principals; and the binding filters of DescribeAcls and
DeleteAcls.

Why: every authorization the brokers make goes through these lines; a wrong match is either a
hole (data readable by anyone) or an outage (a client refused).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkasim.node.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclCache,
    AclOperation,
    AclPermissionType,
    InvalidAclError,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
    parse_super_users,
)

ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"
OP = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def topic(name: str, pattern: PatternType = LIT) -> ResourcePattern:
    return ResourcePattern(ResourceType.TOPIC, name, pattern)


def entry(
    principal: str = ALICE,
    op: AclOperation = OP.READ,
    permission: AclPermissionType = ALLOW,
    host: str = "*",
) -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, permission)


def cache(*bindings: tuple[ResourcePattern, AccessControlEntry], **kw: object) -> AclCache:
    c = AclCache(**kw)  # type: ignore[arg-type]
    for pattern, e in bindings:
        c.put(pattern, c.get(pattern) | {e})
    return c


def test_no_acl_at_all_refuses_unless_allow_everyone_if_no_acl_found() -> None:
    assert not cache().authorize(ALICE, HOST, OP.READ, topic("t"))
    assert cache(allow_if_no_acls=True).authorize(ALICE, HOST, OP.READ, topic("t"))


def test_any_acl_on_the_resource_turns_the_no_acl_rule_off() -> None:
    """Bob's ACL makes the topic 'have ACLs': Alice is refused even with the permissive
    setting (Kafka's isEmptyAclAndAuthorized looks at every ACL of the resource)."""
    c = cache((topic("t"), entry(BOB)), allow_if_no_acls=True)
    assert not c.authorize(ALICE, HOST, OP.READ, topic("t"))
    assert c.authorize(ALICE, HOST, OP.READ, topic("other"))  # no ACLs there


@pytest.mark.parametrize(
    ("stored", "name", "allowed"),
    [
        (topic("orders"), "orders", True),
        (topic("orders"), "orders2", False),
        (topic("*"), "anything", True),
        (topic("ord", PRE), "orders", True),
        (topic("orders", PRE), "orders", True),  # a prefix may be the whole name
        (topic("orders-x", PRE), "orders", False),
        (topic("Ord", PRE), "orders", False),  # case-sensitive
        (topic("*", PRE), "orders", False),  # '*' is a wildcard only as a literal name
        (ResourcePattern(ResourceType.GROUP, "orders", LIT), "orders", False),
    ],
)
def test_literal_wildcard_and_prefixed_patterns_match_as_kafka(
    stored: ResourcePattern, name: str, allowed: bool
) -> None:
    assert cache((stored, entry())).authorize(ALICE, HOST, OP.READ, topic(name)) is allowed


@pytest.mark.parametrize(
    "deny_on",
    [topic("orders"), topic("*"), topic("or", PRE)],
)
def test_deny_wins_over_allow_wherever_each_comes_from(deny_on: ResourcePattern) -> None:
    c = cache(
        (topic("orders"), entry(op=OP.ALL)),
        (topic("ord", PRE), entry()),
        (deny_on, entry(permission=DENY)),
    )
    assert not c.authorize(ALICE, HOST, OP.READ, topic("orders"))
    assert c.authorize(ALICE, HOST, OP.WRITE, topic("orders"))  # the DENY names Read only


def test_deny_all_refuses_every_operation_and_a_wildcard_principal_deny_refuses_everyone() -> None:
    c = cache((topic("t"), entry(op=OP.ALL)), (topic("t"), entry(op=OP.ALL, permission=DENY)))
    assert not any(c.authorize(ALICE, HOST, op, topic("t")) for op in (OP.READ, OP.DESCRIBE))
    c = cache((topic("t"), entry(op=OP.ALL)), (topic("t"), entry("User:*", permission=DENY)))
    assert not c.authorize(ALICE, HOST, OP.READ, topic("t"))


@pytest.mark.parametrize(
    ("granted", "asked", "allowed"),
    [
        (OP.READ, OP.DESCRIBE, True),
        (OP.WRITE, OP.DESCRIBE, True),
        (OP.DELETE, OP.DESCRIBE, True),
        (OP.ALTER, OP.DESCRIBE, True),
        (OP.CREATE, OP.DESCRIBE, False),
        (OP.ALTER_CONFIGS, OP.DESCRIBE_CONFIGS, True),
        (OP.DESCRIBE, OP.READ, False),  # implication goes one way
        (OP.DESCRIBE_CONFIGS, OP.ALTER_CONFIGS, False),
        (OP.ALL, OP.IDEMPOTENT_WRITE, True),
        (OP.READ, OP.WRITE, False),
    ],
)
def test_implied_operations(granted: AclOperation, asked: AclOperation, allowed: bool) -> None:
    c = cache((topic("t"), entry(op=granted)))
    assert c.authorize(ALICE, HOST, asked, topic("t")) is allowed


def test_a_deny_of_read_does_not_deny_the_describe_that_read_implies() -> None:
    """Kafka checks DENY for the operation asked only (no implication on the DENY side)."""
    c = cache((topic("t"), entry(op=OP.DESCRIBE)), (topic("t"), entry(permission=DENY)))
    assert c.authorize(ALICE, HOST, OP.DESCRIBE, topic("t"))
    assert not c.authorize(ALICE, HOST, OP.READ, topic("t"))


def test_super_users_are_allowed_even_against_a_deny() -> None:
    supers = parse_super_users(" User:admin ; User:ops;")
    assert supers == {"User:admin", "User:ops"}
    c = cache((topic("t"), entry("User:admin", op=OP.ALL, permission=DENY)), super_users=supers)
    assert c.authorize("User:admin", HOST, OP.DELETE, topic("t"))
    assert not c.authorize(ALICE, HOST, OP.DELETE, topic("t"))


def test_super_users_take_principals_only() -> None:
    with pytest.raises(InvalidAclError, match="principalType:principalName"):
        parse_super_users("admin")


@pytest.mark.parametrize(
    ("acl_host", "client", "allowed"),
    [("*", "10.0.0.1", True), ("10.0.0.1", "10.0.0.1", True), ("10.0.0.2", "10.0.0.1", False)],
)
def test_host_matching(acl_host: str, client: str, allowed: bool) -> None:
    c = cache((topic("t"), entry(host=acl_host)))
    assert c.authorize(ALICE, client, OP.READ, topic("t")) is allowed


def test_principal_matching_exact_or_the_user_wildcard() -> None:
    c = cache((topic("t"), entry("User:*")), (topic("u"), entry(BOB)))
    assert c.authorize(ALICE, HOST, OP.READ, topic("t"))
    assert not c.authorize(ALICE, HOST, OP.READ, topic("u"))
    assert not c.authorize("User:Alice", HOST, OP.READ, topic("u"))


def test_only_literal_resources_are_asked_about() -> None:
    with pytest.raises(InvalidAclError, match="Only literal"):
        cache().authorize(ALICE, HOST, OP.READ, topic("t", PRE))


def test_an_emptied_pattern_leaves_the_cache() -> None:
    c = cache((topic("t"), entry()))
    c.put(topic("t"), ())
    assert len(c) == 0
    assert c.authorize(ALICE, HOST, OP.READ, topic("t")) is False


_names = st.text(alphabet="ab-", min_size=1, max_size=6)


@given(stored=_names, asked=_names, prefixed=st.booleans())
def test_prefixed_and_literal_matching_properties(stored: str, asked: str, prefixed: bool) -> None:
    """An ACL grants exactly when its pattern matches the name (literal: equal; prefixed:
    a prefix), and the MATCH filter finds exactly the patterns that grant."""
    pattern = topic(stored, PRE if prefixed else LIT)
    c = cache((pattern, entry()))
    expected = asked.startswith(stored) if prefixed else asked == stored
    assert c.authorize(ALICE, HOST, OP.READ, topic(asked)) is expected
    match = AclBindingFilter(
        ResourcePatternFilter(ResourceType.TOPIC, asked, PatternType.MATCH),
        AccessControlEntryFilter(None, None, OP.ANY, AclPermissionType.ANY),
    )
    assert bool(list(c.bindings(match))) is expected


# -- filters and validation ------------------------------------------------------------------


def _filter(
    rtype: ResourceType = ResourceType.ANY,
    name: str | None = None,
    pattern: PatternType = PatternType.ANY,
    principal: str | None = None,
    op: AclOperation = OP.ANY,
) -> AclBindingFilter:
    return AclBindingFilter(
        ResourcePatternFilter(rtype, name, pattern),
        AccessControlEntryFilter(principal, None, op, AclPermissionType.ANY),
    )


def test_binding_filters_as_kafka() -> None:
    c = cache(
        (topic("orders"), entry()),
        (topic("ord", PRE), entry(BOB, OP.WRITE)),
        (topic("*"), entry()),
        (ResourcePattern(ResourceType.GROUP, "g", LIT), entry()),
    )

    def names(f: AclBindingFilter) -> list[str]:
        return [f"{b.pattern.pattern_type.name}:{b.pattern.name}" for b in c.bindings(f)]

    assert len(names(_filter())) == 4
    assert names(_filter(ResourceType.TOPIC, "orders")) == ["LITERAL:orders"]  # ANY: exact
    assert names(_filter(ResourceType.TOPIC, "orders", LIT)) == ["LITERAL:orders"]
    assert names(_filter(ResourceType.TOPIC, "orders", PatternType.MATCH)) == [
        "LITERAL:*",
        "PREFIXED:ord",
        "LITERAL:orders",
    ]
    assert names(_filter(ResourceType.TOPIC, None, PRE)) == ["PREFIXED:ord"]
    assert names(_filter(principal=BOB)) == ["PREFIXED:ord"]
    assert names(_filter(op=OP.WRITE)) == ["PREFIXED:ord"]


def test_unknown_codes_make_a_filter_invalid() -> None:
    bad = _filter(rtype=ResourceType.from_code(99))
    assert bad.pattern.resource_type is ResourceType.UNKNOWN
    with pytest.raises(InvalidAclError, match="UNKNOWN"):
        bad.validate()
    _filter().validate()


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        (AclBinding(topic(""), entry()), "empty resource name"),
        (AclBinding(topic("t", PatternType.MATCH), entry()), "patternType must not be MATCH"),
        (
            AclBinding(ResourcePattern(ResourceType.ANY, "t", LIT), entry()),
            "resourceType must not be ANY",
        ),
        (
            AclBinding(ResourcePattern(ResourceType.CLUSTER, "c", LIT), entry()),
            "only valid name for the CLUSTER resource is kafka-cluster",
        ),
        (AclBinding(topic("t"), entry(op=OP.ANY)), "operation must not be ANY"),
        (AclBinding(topic("t"), entry(permission=AclPermissionType.ANY)), "permissionType"),
        (AclBinding(topic("t"), entry("alice")), "principalType:principalName"),
    ],
)
def test_invalid_bindings_are_refused_naming_the_field(binding: AclBinding, message: str) -> None:
    with pytest.raises(InvalidAclError, match=message):
        binding.validate()


def test_kafka_spellings_of_the_enums() -> None:
    assert OP.parse("DescribeConfigs") is OP.DESCRIBE_CONFIGS
    assert OP.parse("idempotent_write") is OP.IDEMPOTENT_WRITE
    assert OP.DESCRIBE_CONFIGS.pascal == "DescribeConfigs"
    assert ResourceType.TRANSACTIONAL_ID.pascal == "TransactionalId"
    with pytest.raises(ValueError, match="unknown AclOperation 'any'"):
        OP.parse("any")  # a filter value, not a stored one
    assert str(topic("t")) == "ResourcePattern(resourceType=TOPIC, name=t, patternType=LITERAL)"
    assert str(entry()) == "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)"


# -- authorizeByResourceType (KIP-679) ------------------------------------------------------------


def by_type(c: AclCache, op: AclOperation = OP.WRITE, principal: str = ALICE) -> bool:
    return c.authorize_by_resource_type(principal, HOST, op, ResourceType.TOPIC)


def test_by_resource_type_any_literal_or_prefixed_allow_of_the_operation_is_enough() -> None:
    assert not by_type(cache())
    assert by_type(cache((topic("orders"), entry(op=OP.WRITE))))
    assert by_type(cache((topic("ord", PRE), entry(op=OP.WRITE))))
    assert by_type(cache((topic("orders"), entry(op=OP.ALL))))
    assert by_type(cache((topic("orders"), entry("User:*", op=OP.WRITE))))


def test_by_resource_type_counts_only_the_principal_host_operation_and_type_asked() -> None:
    assert not by_type(cache((topic("orders"), entry(BOB, op=OP.WRITE))))
    assert not by_type(cache((topic("orders"), entry(op=OP.WRITE, host="10.9.9.9"))))
    # No implied operations: ALLOW Write does not answer a question about Describe... and
    # ALLOW Read is no Write.
    assert not by_type(cache((topic("orders"), entry(op=OP.WRITE))), OP.DESCRIBE)
    assert not by_type(cache((topic("orders"), entry(op=OP.READ))))
    group = ResourcePattern(ResourceType.GROUP, "orders", LIT)
    assert not by_type(cache((group, entry(op=OP.WRITE))))


def test_by_resource_type_denies_cover_allows_as_kafka() -> None:
    write, deny = entry(op=OP.WRITE), entry(op=OP.WRITE, permission=DENY)
    # A DENY of the same literal name, or of a prefix of it, covers the ALLOW.
    assert not by_type(cache((topic("orders"), write), (topic("orders"), deny)))
    assert not by_type(cache((topic("orders"), write), (topic("or", PRE), deny)))
    assert not by_type(cache((topic("orders-eu", PRE), write), (topic("orders", PRE), deny)))
    # A literal DENY does not cover a prefixed ALLOW, nor a DENY of another name.
    assert by_type(cache((topic("orders", PRE), write), (topic("orders", LIT), deny)))
    assert by_type(cache((topic("orders"), write), (topic("other"), deny)))
    assert by_type(cache((topic("orders"), write), (topic("orders-eu", PRE), deny)))
    # One ALLOW left uncovered is enough.
    assert by_type(cache((topic("a"), write), (topic("b"), write), (topic("a"), deny)))
    # An ALLOW of the wildcard resource is not covered by a prefixed DENY.
    assert by_type(cache((topic("*"), write), (topic("*", PRE), deny)))


def test_by_resource_type_wildcard_deny_super_users_and_allow_everyone() -> None:
    deny_all = (topic("*"), entry(op=OP.WRITE, permission=DENY))
    write = (topic("orders"), entry(op=OP.WRITE))
    assert not by_type(cache(write, deny_all))
    assert not by_type(cache(deny_all, allow_if_no_acls=True))
    assert by_type(cache(deny_all, super_users={ALICE}))
    # allow.everyone.if.no.acl.found answers yes whatever ACLs exist (Kafka's AclAuthorizer),
    # unlike authorize, where any ACL on the resource turns the rule off.
    bobs = cache((topic("orders"), entry(BOB, op=OP.WRITE)), allow_if_no_acls=True)
    assert by_type(bobs)
    assert not bobs.authorize(ALICE, HOST, OP.WRITE, topic("orders"))
    # A DENY other than of the wildcard does not stop the rule either.
    assert by_type(
        cache((topic("orders"), entry(op=OP.WRITE, permission=DENY)), allow_if_no_acls=True)
    )
