"""The admin requests' authorization as Kafka's ``KafkaApis`` decides it, for both front doors
(``node.admin_calls`` applies it; ``node.broker_admin`` for DescribeConfigs):

* CreateTopics: CREATE on the cluster, or else CREATE on each topic (TOPIC_AUTHORIZATION_FAILED,
  "Authorization failed.");
* DeleteTopics: DELETE on each topic; CreatePartitions: ALTER on each topic;
* DescribeConfigs / AlterConfigs / IncrementalAlterConfigs: DESCRIBE_CONFIGS, resp.
  ALTER_CONFIGS, on the topic (TOPIC_AUTHORIZATION_FAILED) or on the cluster for a broker or
  broker logger resource (CLUSTER_AUTHORIZATION_FAILED);
* ElectLeaders: ALTER on the cluster (CLUSTER_AUTHORIZATION_FAILED for the whole request);
* the controller's and brokers' own requests (ControlledShutdown, LeaderAndIsr,
  UpdateMetadata, StopReplica): CLUSTER_ACTION on the cluster (:func:`cluster_action_refusal`).
"""

from __future__ import annotations

from collections.abc import Sequence

from kafkasim.common.errors import KafkaError
from kafkasim.controller.api import TopicResult
from kafkasim.node.acl import AclOperation, ResourceType
from kafkasim.node.authz import (
    ClusterAuthorizationFailed,
    RequestAuth,
    TopicAuthorizationFailed,
)

RESOURCE_TYPE_TOPIC, RESOURCE_TYPE_BROKER, RESOURCE_TYPE_BROKER_LOGGER = 2, 4, 8


def _topic_refusals(
    auth: RequestAuth, operation: AclOperation, names: Sequence[str], message: str
) -> dict[str, TopicResult]:
    if not auth.enabled:
        return {}
    allowed = auth.allowed_names(operation, ResourceType.TOPIC, names)
    return {
        n: TopicResult(n, TopicAuthorizationFailed.code, message) for n in names if n not in allowed
    }


def create_topic_refusals(auth: RequestAuth, names: Sequence[str]) -> dict[str, TopicResult]:
    if auth.cluster(AclOperation.CREATE, log_if_denied=False):
        return {}
    return _topic_refusals(auth, AclOperation.CREATE, names, "Authorization failed.")


def delete_topic_refusals(auth: RequestAuth, names: Sequence[str]) -> dict[str, TopicResult]:
    return _topic_refusals(auth, AclOperation.DELETE, names, "")


def create_partitions_refusals(auth: RequestAuth, names: Sequence[str]) -> dict[str, TopicResult]:
    return _topic_refusals(auth, AclOperation.ALTER, names, "The topic authorization is failed.")


def config_refusal(
    auth: RequestAuth, operation: AclOperation, resource_type: int, name: str
) -> KafkaError | None:
    """The error of a config resource the caller may not describe or alter (None: allowed,
    or a type left to the call to refuse)."""
    if resource_type == RESOURCE_TYPE_TOPIC:
        allowed = auth.allowed(operation, ResourceType.TOPIC, name)
        return None if allowed else TopicAuthorizationFailed(f"Topic {name} is not authorized.")
    if resource_type in (RESOURCE_TYPE_BROKER, RESOURCE_TYPE_BROKER_LOGGER) and not (
        auth.cluster(operation)
    ):
        return ClusterAuthorizationFailed("Cluster authorization failed.")
    return None


def cluster_refusal(auth: RequestAuth, operation: AclOperation) -> KafkaError | None:
    """Kafka's ``authorizeClusterOperation``: CLUSTER_AUTHORIZATION_FAILED when refused."""
    if auth.cluster(operation):
        return None
    return ClusterAuthorizationFailed(f"Request {auth.api} is not authorized.")


def cluster_action_refusal(auth: RequestAuth) -> KafkaError | None:
    """An inter-broker or controller request: CLUSTER_ACTION on the cluster."""
    return cluster_refusal(auth, AclOperation.CLUSTER_ACTION)
