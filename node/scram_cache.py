"""A broker's cache of SCRAM credentials (Kafka's ``CredentialCache``), read from ZooKeeper's
``/config/users/<user>`` and kept current by the config change notifications
(``node.config_changes``: ``users/<user>`` entity paths), so that a user added or changed with
``kafkasim configs --entity-type users`` can log in without a restart.

A user's znode holds its credentials per mechanism (``common.scram``'s text form); one that
does not decode is logged and leaves the user without that mechanism.
"""

from __future__ import annotations

import logging

from kafkasim.common.coordination import Coordination, NoNodeError
from kafkasim.common.scram import MECHANISMS, ScramCredential, ScramError, decode_credential
from kafkasim.controller import zk_data

logger = logging.getLogger(__name__)


def decode_user_credentials(data: bytes, user: str) -> dict[str, ScramCredential]:
    """A ``/config/users/<user>`` znode → {mechanism: credential} (other keys are ignored:
    Kafka keeps client quotas there too; a credential that does not decode is logged)."""
    out: dict[str, ScramCredential] = {}
    for key, value in zk_data.decode_topic_config(data).items():
        if key not in MECHANISMS:
            continue
        try:
            out[key] = decode_credential(value)
        except ScramError as e:
            logger.error("user %s: ignoring its %s credential: %s", user, key, e)
    return out


class ScramCredentialCache:
    """{user: {mechanism: credential}}; read on the broker's event loop only."""

    def __init__(self) -> None:
        self._users: dict[str, dict[str, ScramCredential]] = {}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._users.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {user: dict(creds) for user, creds in self._users.items()}

    async def load_all(self, zk: Coordination) -> None:
        """Every user's credentials (at start, and after a notification may have been lost)."""
        try:
            children = await zk.get_children(zk_data.CONFIG_USERS)
        except NoNodeError:
            children = []
        users = [zk_data.desanitize_user(child) for child in children]
        for user in set(self._users) - set(users):
            del self._users[user]
        for user in users:
            await self.reload(zk, user)

    async def reload(self, zk: Coordination, user: str) -> None:
        """Re-read one user's credentials (a ``users/<user>`` notification)."""
        try:
            data, _ = await zk.get(zk_data.user_config_path(user))
        except NoNodeError:
            if self._users.pop(user, None) is not None:
                logger.info("SCRAM credentials of user %s removed", user)
            return
        self.update(user, decode_user_credentials(data, user))

    def update(self, user: str, credentials: dict[str, ScramCredential]) -> None:
        """Put ``user``'s credentials (all its mechanisms; none: the user is gone)."""
        if self._users.get(user) != credentials:
            logger.info(
                "SCRAM credentials of user %s: %s", user, ", ".join(sorted(credentials)) or "none"
            )
        if credentials:
            self._users[user] = dict(credentials)
        else:
            self._users.pop(user, None)
