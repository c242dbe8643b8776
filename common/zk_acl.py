"""ZooKeeper's access control, as the Coordination port sees it (pure: no I/O but the JAAS read).

A znode carries an ACL list fixed when it is created (a child does not inherit its parent's).
Each entry grants permission bits to an identity ``scheme:id``:

* ``world:anyone`` — everybody, authenticated or not;
* ``digest:<user>:<base64(sha1(user:password))>`` — a session that called
  ``addAuth("digest", "user:password")``;
* ``auth:`` — on create only: "every identity this session has authenticated as"; the server
  replaces it with those identities (InvalidACL if the session has none).

The server checks (ZooKeeper's PrepRequestProcessor / FinalRequestProcessor): CREATE on the
parent for a create, DELETE on the parent for a delete, WRITE on the node for a set, READ on
the node for get, get_children and a multi's check; ``exists`` and ``get_acls`` need nothing
here (ZooKeeper 3.8 lets anyone read an ACL list). A refused request fails with
NoAuthError and changes nothing.

Kafka's brokers authenticate (Kafka: SASL from the JAAS ``Client`` section; kafkasim: the
``digest`` scheme with the same section's username and password, which needs no server-side
configuration) and, with ``zookeeper.set.acl=true``, create every znode with ``auth:``
ALL plus, outside the sensitive paths, ``world:anyone`` READ (``controller/zk_data.py``
``default_acls``).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kafkasim.common.coordination import (
    ANYONE,
    AUTH,
    CREATOR_ALL_ACL,
    DIGEST,
    OPEN_ACL_UNSAFE,
    READ_ACL_UNSAFE,
    WORLD,
    Acl,
    InvalidACLError,
    Perm,
)
from kafkasim.common.errors import KafkasimError

__all__ = [
    "ANYONE",
    "AUTH",
    "CREATOR_ALL_ACL",
    "DIGEST",
    "OPEN",
    "OPEN_ACL_UNSAFE",
    "READ_ACL_UNSAFE",
    "WORLD",
    "Acl",
    "AclPolicy",
    "JaasConfigError",
    "Perm",
    "ZkAuth",
    "ZkSecurity",
    "digest_id",
    "fix_up",
    "jaas_client_text",
    "permitted",
    "read_jaas_client",
]

AclPolicy = Callable[[str], Sequence[Acl]]
"""The ACL list to create a znode at a path with."""


@dataclass(frozen=True, slots=True)
class ZkAuth:
    """The credentials a session authenticates with: ``digest`` and ``user:password``."""

    scheme: str
    credential: str

    def __post_init__(self) -> None:
        if self.scheme != DIGEST:
            raise ValueError(f"unsupported ZooKeeper auth scheme {self.scheme!r} (only digest)")
        if ":" not in self.credential:
            raise ValueError("a digest credential is user:password")

    def __repr__(self) -> str:  # never print the password
        return f"ZkAuth({self.scheme}, {self.credential.split(':', 1)[0]}:***)"

    def identity(self) -> tuple[str, str]:
        """The identity the server records for this session (``digest``, ``user:hash``)."""
        return DIGEST, digest_id(self.credential)


@dataclass(frozen=True, slots=True)
class ZkSecurity:
    """How a session authenticates, and the ACLs it creates znodes with (None: open)."""

    auth: ZkAuth | None = None
    acls: AclPolicy | None = None

    def acls_for(self, path: str) -> list[Acl]:
        return list(OPEN_ACL_UNSAFE if self.acls is None else self.acls(path))


OPEN = ZkSecurity()


def digest_id(credential: str) -> str:
    """ZooKeeper's DigestAuthenticationProvider: ``user:base64(sha1("user:password"))``."""
    user = credential.split(":", 1)[0]
    digest = hashlib.sha1(credential.encode("utf-8")).digest()  # ZooKeeper's digest is SHA-1
    return f"{user}:{base64.b64encode(digest).decode('ascii')}"


def permitted(acls: Iterable[Acl], perm: Perm, identities: Iterable[tuple[str, str]]) -> bool:
    """ZooKeeper's checkACL: an empty list allows everything; else some entry must grant
    ``perm`` to ``world:anyone`` or to one of the session's identities."""
    entries = list(acls)
    if not entries:
        return True
    held = set(identities)
    return any(
        entry.perms & perm
        and ((entry.scheme, entry.id) == (WORLD, ANYONE) or (entry.scheme, entry.id) in held)
        for entry in entries
    )


def fix_up(acls: Sequence[Acl], identities: Sequence[tuple[str, str]]) -> list[Acl]:
    """ZooKeeper's fixupACL: ``auth:`` entries become one per authenticated identity; an empty
    list, ``auth:`` without any identity or an unknown scheme is InvalidACLError."""
    if not acls:
        raise InvalidACLError("an empty ACL list")
    fixed: list[Acl] = []
    for entry in acls:
        if entry.scheme == AUTH:
            if not identities:
                raise InvalidACLError("auth: ACL on a session that has not authenticated")
            fixed.extend(Acl(entry.perms, scheme, ident) for scheme, ident in identities)
        elif entry.scheme in (WORLD, DIGEST):
            fixed.append(entry)
        else:
            raise InvalidACLError(f"unknown ACL scheme {entry.scheme!r}")
    return list(dict.fromkeys(fixed))


class JaasConfigError(KafkasimError):
    """The JAAS file is missing or has no usable ``Client`` section."""


_SECTION = re.compile(r"(\w+)\s*\{(.*?)\}\s*;", re.DOTALL)
_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def read_jaas_client(path: Path, section: str = "Client") -> ZkAuth:
    """The username and password of the JAAS file's ``Client`` section (Kafka's format)::

    Client {
      org.apache.zookeeper.server.auth.DigestLoginModule required
      username="kafka"
      password="secret";
    };
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise JaasConfigError(f"cannot read the JAAS file {path}: {e.strerror}") from None
    for name, body in _SECTION.findall(text):
        if name != section:
            continue
        options = {key: value.replace('\\"', '"') for key, value in _OPTION.findall(body)}
        user, password = options.get("username"), options.get("password")
        if not user or password is None or ":" in user:
            raise JaasConfigError(
                f"the {section} section of {path} needs username=\"…\" (without ':') and "
                'password="…"'
            )
        return ZkAuth(DIGEST, f"{user}:{password}")
    raise JaasConfigError(f"no {section} section in the JAAS file {path}")


def jaas_client_text(user: str, password: str) -> str:
    """A JAAS file with the ``Client`` section :func:`read_jaas_client` reads."""
    if ":" in user or '"' in user or '"' in password:
        raise ValueError("the JAAS user may not contain ':' or '\"', the password not '\"'")
    return (
        "Client {\n"
        "  org.apache.zookeeper.server.auth.DigestLoginModule required\n"
        f'  username="{user}"\n'
        f'  password="{password}";\n'
        "};\n"
    )
