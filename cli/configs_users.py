"""``kafkasim configs --entity-type users``: SCRAM credentials, as kafka-configs.sh manages them
in ZooKeeper mode (``--zookeeper``; Kafka's ConfigCommand + ScramCredentialUtils).

``--alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=alice-secret]'`` salts and
hashes the password here (the password itself is stored nowhere) and writes
``/config/users/<user>`` ``{"version":1,"config":{"SCRAM-SHA-256":"salt=…,stored_key=…,
server_key=…,iterations=8192"}}`` with a ``users/<user>`` change notification, which every
broker follows (its credential cache, ``node.scram_cache``) without a restart.
``--delete-config SCRAM-SHA-256`` removes a mechanism. ``--describe`` shows each user's
mechanisms and iterations, never a salt or a key::

    SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=8192

ZooKeeper is ``--zookeeper HOST:PORT`` (its credentials, when the cluster runs with
``zookeeper.set.acl``: ``zookeeper.jaas.config.file`` in ``--command-config``) or ``--dir`` of
a ``kafkasim cluster up`` directory. ``/config/users`` is a sensitive path: with ZooKeeper ACLs
on, only the brokers' identity can read or write it.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from kafkasim.cli.connect import cluster_zookeeper
from kafkasim.common.config import read_properties
from kafkasim.common.coordination import NoNodeError
from kafkasim.common.scram import (
    MECHANISMS,
    ScramError,
    credential_from_password,
    encode_credential,
)
from kafkasim.common.zk_acl import ZkSecurity
from kafkasim.controller import zk_data
from kafkasim.controller.zk_kazoo import KazooCoordination
from kafkasim.node.scram_cache import decode_user_credentials
from kafkasim.node.topic_config_admin import write_entity_config
from kafkasim.node.zk_security import zk_security_from_props

ZK_SESSION_TIMEOUT_MS = 30_000
DEFAULT_ITERATIONS = 4096  # Kafka's ConfigCommand default


class UserConfigError(Exception):
    """A users command that cannot be done as asked (printed alone, exit 1)."""


def zookeeper_of(args: argparse.Namespace) -> tuple[str, ZkSecurity]:
    """ZooKeeper's connect string and credentials from ``--zookeeper`` (+ ``--command-config``)
    or ``--dir``."""
    if args.zookeeper and args.dir:
        raise ValueError("give --zookeeper or --dir, not both")
    if args.dir is not None:
        return cluster_zookeeper(args.dir)
    if not args.zookeeper:
        raise ValueError(
            "--entity-type users needs --zookeeper HOST:PORT (or --dir): SCRAM credentials are "
            "written to ZooKeeper, as kafka-configs.sh --zookeeper does"
        )
    props = read_properties(Path(args.command_config)) if args.command_config else {}
    return str(args.zookeeper), zk_security_from_props(props)


def credentials_to_add(to_set: dict[str, str]) -> dict[str, str]:
    """``{mechanism: "iterations=N,password=P"}`` → ``{mechanism: stored credential text}``;
    UserConfigError naming what is wrong (Kafka's wording)."""
    out: dict[str, str] = {}
    for key, value in to_set.items():
        scram = MECHANISMS.get(key)
        if scram is None:
            raise UserConfigError(
                f"Invalid config {key} for users: only {', '.join(MECHANISMS)} are supported"
            )
        fields = dict(part.partition("=")[::2] for part in value.split(",") if part)
        unknown = set(fields) - {"iterations", "password"}
        password = fields.get("password")
        if unknown or not password:
            raise UserConfigError(
                f"Invalid credential config {key}: expected {key}=[iterations=N,password=P] "
                "(or [password=P])"
            )
        iterations = fields.get("iterations", str(DEFAULT_ITERATIONS))
        if not iterations.isdigit():
            raise UserConfigError(f"Invalid iterations {iterations} for {key}")
        try:
            credential = credential_from_password(scram, password, int(iterations))
        except ScramError as e:
            raise UserConfigError(str(e)) from None
        out[key] = encode_credential(credential)
    return out


async def alter(
    connect: str, security: ZkSecurity, user: str, to_set: dict[str, str], to_delete: list[str]
) -> None:
    added = credentials_to_add(to_set)
    unknown = [k for k in to_delete if k not in MECHANISMS]
    if unknown:
        raise UserConfigError(f"Invalid config(s): {','.join(unknown)}")
    zk = KazooCoordination(connect, ZK_SESSION_TIMEOUT_MS, security=security)
    await zk.start()
    try:

        def apply(current: dict[str, str]) -> dict[str, str]:
            missing = [k for k in to_delete if k not in current]
            if missing:
                raise UserConfigError(f"Invalid config(s): {','.join(missing)}")
            kept = {k: v for k, v in current.items() if k not in to_delete}
            return {**kept, **added}

        await write_entity_config(
            zk,
            zk_data.user_config_path(user),
            zk_data.user_entity_path(user),
            apply,
            validate_only=False,
        )
    finally:
        await zk.close()


async def describe(connect: str, security: ZkSecurity, user: str | None) -> list[str]:
    zk = KazooCoordination(connect, ZK_SESSION_TIMEOUT_MS, security=security)
    await zk.start()
    try:
        if user is not None:
            users = [user]
        else:
            try:
                children = await zk.get_children(zk_data.CONFIG_USERS)
            except NoNodeError:
                children = []
            users = sorted(zk_data.desanitize_user(c) for c in children)
        lines: list[str] = []
        for name in users:
            try:
                data, _ = await zk.get(zk_data.user_config_path(name))
            except NoNodeError:
                credentials = {}
            else:
                credentials = decode_user_credentials(data, name)
            listed = ", ".join(
                f"{mechanism}=iterations={c.iterations}"
                for mechanism, c in sorted(credentials.items())
            )
            lines.append(f"SCRAM credential configs for user-principal '{name}' are {listed}")
        return lines
    finally:
        await zk.close()


def run_users(
    args: argparse.Namespace, name: str | None, to_set: dict[str, str], to_delete: list[str]
) -> list[str]:
    """The users command; the lines to print."""
    connect, security = zookeeper_of(args)
    if args.alter:
        assert name is not None
        asyncio.run(alter(connect, security, name, to_set, to_delete))
        return [f"Completed updating config for user {name}."]
    return asyncio.run(describe(connect, security, name))
