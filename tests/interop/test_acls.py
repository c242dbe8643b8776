"""ACLs end to end on real processes: a 2-broker cluster whose brokers run Kafka's ACL
authorizer (``super.users=User:ANONYMOUS``, so that this module's clients, unauthenticated,
stay unaffected once enforcement lands) against a real ZooKeeper. confluent-kafka's
AdminClient creates, describes and deletes ACLs over the Kafka listener; ``kafkasim acls``
adds, lists and removes them straight in ZooKeeper, and the brokers see its changes through
the change notifications (the AdminClient's next DescribeAcls answers them).

Its own cluster rather than the shared fixture: the other interop modules run brokers without
an authorizer, as a default cluster is."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from kafkasim.cluster.local import LocalCluster
from tests.cli_run import kafkasim, local_cluster

_T = TypeVar("_T")
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    props: dict[str, object] = {
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:ANONYMOUS",
    }
    with local_cluster(tmp_path_factory.mktemp("acls"), brokers=2, broker_props=props) as c:
        yield c


def _admin(cluster: LocalCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.kafka_bootstrap})


def _until(check: Callable[[], _T | None], what: str) -> _T:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _describe(admin: AdminClient, name: str | None = None) -> list[AclBinding]:
    flt = AclBindingFilter(
        ResourceType.ANY if name is None else ResourceType.TOPIC,
        name,
        ResourcePatternType.ANY,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    return list(admin.describe_acls(flt, request_timeout=10).result())


def test_confluent_kafka_creates_describes_and_deletes_acls(acl_cluster: LocalCluster) -> None:
    admin = _admin(acl_cluster)
    read = AclBinding(
        ResourceType.TOPIC,
        "payments",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    write = AclBinding(
        ResourceType.TOPIC,
        "pay",
        ResourcePatternType.PREFIXED,
        "User:bob",
        "10.0.0.1",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )
    for future in admin.create_acls([read, write], request_timeout=10).values():
        future.result()

    # librdkafka may ask the other broker: its cache follows the notifications.
    def both() -> list[AclBinding] | None:
        acls = _describe(admin)
        return acls if len(acls) == 2 else None

    by_name = _until(both, "both ACLs described")
    assert sorted(b.name for b in by_name) == ["pay", "payments"]
    # ANY compares names exactly: only the literal ACL is named payments.
    assert [b.name for b in _describe(admin, "payments")] == ["payments"]
    bob = next(b for b in by_name if b.name == "pay")
    assert (bob.principal, bob.host, bob.operation, bob.permission_type) == (
        "User:bob",
        "10.0.0.1",
        AclOperation.WRITE,
        AclPermissionType.DENY,
    )
    deleted = admin.delete_acls(
        [
            AclBindingFilter(
                ResourceType.TOPIC,
                None,
                ResourcePatternType.ANY,
                None,
                None,
                AclOperation.ANY,
                AclPermissionType.ANY,
            )
        ],
        request_timeout=10,
    )
    (future,) = deleted.values()
    assert sorted(b.name for b in future.result()) == ["pay", "payments"]
    _until(lambda: _describe(admin) == [], "no ACL left")


def test_the_acls_tool_adds_lists_and_removes_and_the_brokers_follow(
    acl_cluster: LocalCluster,
) -> None:
    zk = f"zookeeper.connect={acl_cluster.zookeeper.connect_string}"
    added = kafkasim(
        "acls",
        "--authorizer-properties",
        zk,
        "--add",
        "--allow-principal",
        "User:carol",
        "--operation",
        "Read",
        "--operation",
        "Describe",
        "--topic",
        "ledger",
    )
    assert added.returncode == 0, added.stderr
    pattern = "`ResourcePattern(resourceType=TOPIC, name=ledger, patternType=LITERAL)`"
    entries = (
        " \t(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)\n"
        "\t(principal=User:carol, host=*, operation=DESCRIBE, permissionType=ALLOW) \n"
    )
    assert added.stdout == (
        f"Adding ACLs for resource {pattern}: \n{entries}\n"
        f"Current ACLs for resource {pattern}: \n{entries}\n"
    )
    admin = _admin(acl_cluster)
    seen = _until(lambda: _describe(admin, "ledger") or None, "the brokers to see the tool's ACLs")
    assert {(b.principal, b.operation) for b in seen} == {
        ("User:carol", AclOperation.READ),
        ("User:carol", AclOperation.DESCRIBE),
    }

    listed = kafkasim("acls", "--authorizer-properties", zk, "--list", "--topic", "ledger")
    assert listed.stdout == f"Current ACLs for resource {pattern}: \n{entries}\n"

    refused = kafkasim(
        "acls", "--authorizer-properties", zk, "--add", "--allow-principal", "User:x",
        "--operation", "ClusterAction", "--topic", "ledger",
    )  # fmt: skip
    assert refused.returncode == 1
    assert "ResourceType TOPIC only supports operations" in refused.stderr

    kept = kafkasim("acls", "--authorizer-properties", zk, "--remove", "--topic", "ledger")
    assert "Are you sure you want to delete all ACLs" in kept.stdout  # no 'y' on stdin
    assert _describe(admin, "ledger")
    removed = kafkasim(
        "acls", "--authorizer-properties", zk, "--remove", "--force", "--topic", "ledger"
    )
    assert removed.returncode == 0, removed.stderr
    _until(lambda: _describe(admin, "ledger") == [], "the brokers to see the removal")
