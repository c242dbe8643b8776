"""CreateAcls, DescribeAcls and DeleteAcls on the Kafka protocol (v1-3), handled by a broker
whose authorizer runs on SimZooKeeper; every response is also encoded, as the listener would.

Why: Kafka's admin clients (confluent-kafka, kafka-acls.sh) read these exact codes and
shapes: SECURITY_DISABLED without an authorizer, INVALID_REQUEST for bad input with nothing
written, and the bindings grouped by resource.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kio.index import load_request_schema

from kafkasim.common.errors import error_for_name
from kafkasim.common.security import ANONYMOUS
from kafkasim.node.acl_authorizer import AclAuthorizer
from kafkasim.node.apis import BrokerServices
from kafkasim.node.kafka_apis_acls import KafkaAclApis
from kafkasim.node.kafka_codec import KafkaRequest, build, encode_response
from kafkasim.sim.loop import run_simulation
from kafkasim.sim.zookeeper import SimZooKeeperClient, SimZooKeeperServer

INVALID_REQUEST = error_for_name("INVALID_REQUEST").code
SECURITY_DISABLED = error_for_name("SECURITY_DISABLED").code
TOPIC, GROUP, CLUSTER, ANY_TYPE = 2, 3, 4, 1
LITERAL, PREFIXED, MATCH, ANY_PATTERN = 3, 4, 2, 1
READ, WRITE, ANY_OP, ALL = 3, 4, 1, 2
ALLOW, DENY, ANY_PERM = 3, 2, 1


def request(api_key: int, version: int, **values: Any) -> KafkaRequest:
    return KafkaRequest(
        api_key, version, 1, "unit", build(load_request_schema(api_key, version), values)
    )


def creation(
    name: str = "orders",
    *,
    rtype: int = TOPIC,
    pattern: int = LITERAL,
    principal: str = "User:alice",
    op: int = READ,
    perm: int = ALLOW,
) -> dict[str, Any]:
    return {
        "resource_type": rtype,
        "resource_name": name,
        "resource_pattern_type": pattern,
        "principal": principal,
        "host": "*",
        "operation": op,
        "permission_type": perm,
    }


def acl_filter(
    name: str | None = None, rtype: int = ANY_TYPE, pattern: int = ANY_PATTERN, op: int = ANY_OP
) -> dict[str, Any]:
    return {
        "resource_type_filter": rtype,
        "resource_name_filter": name,
        "pattern_type_filter": pattern,
        "principal_filter": None,
        "host_filter": None,
        "operation": op,
        "permission_type": ANY_PERM,
    }


def run(scenario: Callable[[KafkaAclApis, SimZooKeeperClient], Awaitable[None]]) -> None:
    async def main() -> None:
        zk = SimZooKeeperClient(SimZooKeeperServer(), 6_000)
        await zk.start()
        # The caller (anonymous here) is a super user: the ACL APIs need ALTER/DESCRIBE on
        # the cluster.
        authorizer = AclAuthorizer(zk, frozenset({ANONYMOUS}))
        await authorizer.start()
        apis = KafkaAclApis(cast(BrokerServices, SimpleNamespace(authorizer=authorizer)))
        try:
            await scenario(apis, zk)
        finally:
            await authorizer.stop()
            await zk.close()

    run_simulation(main(), time_limit_s=60)


async def call(apis: KafkaAclApis, req: KafkaRequest) -> Any:
    handler = apis.table()[req.api_key][2]
    response = await handler(req)
    encode_response(req, response)  # every answer must be writable at its version
    return response


@pytest.mark.parametrize("version", [1, 2, 3])
def test_create_describe_delete_round_trip(version: int) -> None:
    async def scenario(apis: KafkaAclApis, zk: SimZooKeeperClient) -> None:
        created = await call(
            apis,
            request(
                30,
                version,
                creations=[
                    creation(),
                    creation("ord", pattern=PREFIXED, op=WRITE),
                    creation("kafka-cluster", rtype=CLUSTER, op=ALL, perm=DENY),
                ],
            ),
        )
        assert [r.error_code for r in created.results] == [0, 0, 0]
        described = await call(apis, request(29, version, **acl_filter("orders", TOPIC, MATCH)))
        assert described.error_code == 0
        assert [(r.resource_name, r.pattern_type) for r in described.resources] == [
            ("ord", PREFIXED),
            ("orders", LITERAL),
        ]
        assert [
            (a.principal, a.host, a.operation, a.permission_type)
            for a in (described.resources[1].acls)
        ] == [("User:alice", "*", READ, ALLOW)]
        deleted = await call(
            apis, request(31, version, filters=[acl_filter(rtype=TOPIC), acl_filter("nothing")])
        )
        first, second = deleted.filter_results
        assert [(m.resource_name, m.error_code) for m in first.matching_acls] == [
            ("ord", 0),
            ("orders", 0),
        ]
        assert second.error_code == 0 and second.matching_acls == ()
        left = await call(apis, request(29, version, **acl_filter()))
        assert [r.resource_type for r in left.resources] == [CLUSTER]
        assert await zk.get_children("/kafka-acl/Topic") == []

    run(scenario)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (creation(""), "empty resource name"),
        (creation(pattern=MATCH), "patternType must not be MATCH"),
        (creation(rtype=99), "resourceType must not be UNKNOWN"),
        (creation(op=ANY_OP), "operation must not be ANY"),
        (creation(principal="alice"), "principalType:principalName"),
        (creation("c", rtype=CLUSTER), "kafka-cluster"),
        (creation("a/b", rtype=GROUP), "contains '/'"),
    ],
)
def test_bad_creations_are_invalid_request_and_write_nothing(
    bad: dict[str, Any], message: str
) -> None:
    async def scenario(apis: KafkaAclApis, zk: SimZooKeeperClient) -> None:
        created = await call(apis, request(30, 3, creations=[bad, creation("ok")]))
        assert [r.error_code for r in created.results] == [INVALID_REQUEST, 0]
        assert message in created.results[0].error_message
        everything = await call(apis, request(29, 3, **acl_filter()))
        assert [r.resource_name for r in everything.resources] == ["ok"]

    run(scenario)


def test_filters_with_unknown_codes_are_invalid_request() -> None:
    async def scenario(apis: KafkaAclApis, zk: SimZooKeeperClient) -> None:
        await call(apis, request(30, 3, creations=[creation()]))
        described = await call(apis, request(29, 3, **acl_filter(op=42)))
        assert described.error_code == INVALID_REQUEST and described.resources == ()
        deleted = await call(apis, request(31, 3, filters=[acl_filter(pattern=9)]))
        assert deleted.filter_results[0].error_code == INVALID_REQUEST
        everything = await call(apis, request(29, 3, **acl_filter()))
        assert len(everything.resources) == 1  # nothing deleted

    run(scenario)


def test_without_an_authorizer_every_answer_is_security_disabled() -> None:
    async def main() -> None:
        apis = KafkaAclApis(cast(BrokerServices, SimpleNamespace(authorizer=None)))
        described = await call(apis, request(29, 2, **acl_filter()))
        assert described.error_code == SECURITY_DISABLED
        assert described.error_message == "No Authorizer is configured on the broker"
        created = await call(apis, request(30, 1, creations=[creation(), creation("x")]))
        assert [r.error_code for r in created.results] == [SECURITY_DISABLED] * 2
        deleted = await call(apis, request(31, 3, filters=[acl_filter()]))
        assert deleted.filter_results[0].error_code == SECURITY_DISABLED

    run_simulation(main(), time_limit_s=60)
