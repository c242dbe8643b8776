"""The admin client's configuration: the keys of Kafka's ``AdminClientConfig`` that kafkasim's
:class:`~client.admin.AdminClient` reads, declared once (:data:`ADMIN_CONFIG`).

Unknown keys are refused naming the key; ``bootstrap.servers`` is required.
"""

from __future__ import annotations

from kafkasim.common.config import Config, ConfigDef, ConfigKey, ConfigType
from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.tls import CLIENT_SECURITY_KEYS

__all__ = ["ADMIN_CONFIG", "ADMIN_KEYS"]

ADMIN_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "bootstrap.servers", ConfigType.LIST, None, "host:port of brokers to ask for metadata."
    ),
    ConfigKey("client.id", ConfigType.STRING, "", "A name for logs."),
    ConfigKey(
        "request.timeout.ms", ConfigType.INT, 30_000, "How long to wait for one answer.", low=0
    ),
    ConfigKey(
        "default.api.timeout.ms",
        ConfigType.INT,
        60_000,
        "Bound of one admin operation, its retries (NOT_CONTROLLER, a leader moving, a "
        "broker down) included.",
        low=0,
    ),
    ConfigKey(
        "retry.backoff.ms", ConfigType.LONG, 100, "Wait before a failed request is retried.", low=0
    ),
)


def _check_required(config: Config) -> None:
    if not config["bootstrap.servers"]:
        raise InvalidConfigError(
            'Missing required configuration "bootstrap.servers" which has no default value.'
        )


ADMIN_CONFIG = ConfigDef(
    (*ADMIN_KEYS, *CLIENT_SECURITY_KEYS), rules=(_check_required,), kind="admin configuration"
)
"""The admin client's keys, one declaration each."""
