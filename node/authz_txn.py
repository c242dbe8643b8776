"""The transactional requests' authorization as Kafka's ``KafkaApis`` decides it, for both
front doors (``node.kafka_apis_txn``, ``node.apis_txn``): each function answers the refusal
(an error class) or None, and the door answers it without calling the coordinator.

* AddPartitionsToTxn: WRITE on the transactional id (every partition
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED); WRITE on each topic (TOPIC_AUTHORIZATION_FAILED for
  the refused, OPERATION_NOT_ATTEMPTED for the others) — :func:`add_partitions_refusals`;
* AddOffsetsToTxn: WRITE on the transactional id, then READ on the group
  (GROUP_AUTHORIZATION_FAILED); EndTxn: WRITE on the transactional id;
* DescribeTransactions: DESCRIBE on each transactional id; ListTransactions lists only those
  (the refused are left out, unlogged).
InitProducerId and FindCoordinator are in ``node.apis_cluster``; TxnOffsetCommit in
``node.authz_groups``.
"""

from __future__ import annotations

from collections.abc import Iterable

from kafkasim.common.types import TopicPartition
from kafkasim.node.acl import AclOperation, ResourceType
from kafkasim.node.authz import (
    GroupAuthorizationFailed,
    RequestAuth,
    TopicAuthorizationFailed,
    TransactionalIdAuthorizationFailed,
)
from kafkasim.node.group_types import Error
from kafkasim.node.txn_requests import OPERATION_NOT_ATTEMPTED
from kafkasim.node.txn_types import TxnDescription, TxnListing


def transactional_id_refusal(auth: RequestAuth, transactional_id: str) -> Error:
    if auth.allowed(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return None
    return TransactionalIdAuthorizationFailed


def add_partitions_refusals(
    auth: RequestAuth, transactional_id: str, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, Error]:
    """Every partition's error when the request is refused; empty when it may go on."""
    tps = sorted(partitions)
    if not auth.enabled:
        return {}
    if transactional_id_refusal(auth, transactional_id) is not None:
        return dict.fromkeys(tps, TransactionalIdAuthorizationFailed)
    allowed = auth.allowed_names(AclOperation.WRITE, ResourceType.TOPIC, (tp.topic for tp in tps))
    if all(tp.topic in allowed for tp in tps):
        return {}
    return {
        tp: OPERATION_NOT_ATTEMPTED if tp.topic in allowed else TopicAuthorizationFailed
        for tp in tps
    }


def add_offsets_refusal(auth: RequestAuth, transactional_id: str, group_id: str) -> Error:
    refusal = transactional_id_refusal(auth, transactional_id)
    if refusal is None and not auth.allowed(AclOperation.READ, ResourceType.GROUP, group_id):
        return GroupAuthorizationFailed
    return refusal


def described(auth: RequestAuth, transactional_id: str) -> TxnDescription | None:
    """The refused answer of one DescribeTransactions id, or None when it may be described."""
    if auth.allowed(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return None
    return TxnDescription(transactional_id, TransactionalIdAuthorizationFailed)


def listed(auth: RequestAuth, listing: TxnListing) -> TxnListing:
    if not auth.enabled:
        return listing
    shown = auth.allowed_names(
        AclOperation.DESCRIBE,
        ResourceType.TRANSACTIONAL_ID,
        (t.transactional_id for t in listing.transactions),
        log_if_denied=False,
    )
    return TxnListing(
        listing.error,
        listing.unknown_state_filters,
        tuple(t for t in listing.transactions if t.transactional_id in shown),
    )
