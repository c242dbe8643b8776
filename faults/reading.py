"""Reading scenarios: the TOML reader (the shape and type of every value, with its key path in
errors; the values themselves are judged by ``validation.check``), and the shipped catalog."""

from __future__ import annotations

import math
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, NoReturn

from kafkasim.faults.actions import ACTIONS, ActionSpec, ParamKind
from kafkasim.faults.history import READ_UNCOMMITTED
from kafkasim.faults.scenario import (
    CLIENT_KAFKASIM,
    ClusterSpec,
    ConfigValue,
    ConsumerSpec,
    Fault,
    ProducerSpec,
    RandomFaults,
    Scenario,
    ScenarioError,
    TopicSpec,
    TransformerSpec,
    WorkloadSpec,
    describe_value,
    key_path,
)
from kafkasim.faults.validation import check

__all__ = ["CATALOG_DIR", "catalog", "find", "load", "parse"]

CATALOG_DIR: Final = Path(__file__).with_name("catalog")
_PRODUCER_TXN_KEYS: Final = (
    "transactional",
    "transactional_id",
    "transaction_records",
    "abort_every",
    "transaction_timeout_ms",
    "start_s",
    "pause_at_s",
    "pause_s",
)


def load(path: str | Path) -> Scenario:
    """Read and check a scenario file (the only IO of this module, with ``catalog``)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ScenarioError(f"cannot read: {e.strerror or e}", source=str(path)) from None
    except UnicodeDecodeError as e:
        raise ScenarioError(f"not UTF-8 text: {e}", source=str(path)) from None
    return parse(text, source=str(path))


def parse(text: str, *, source: str) -> Scenario:
    """A scenario from TOML text; ``source`` names it in errors."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ScenarioError(f"not valid TOML: {e}", source=source) from None
    scenario = _Reader(source).scenario(raw)
    check(scenario, source=source)
    return scenario


class _Reader:
    """Shapes and types of the TOML document, with the key path of every value. Values are
    judged afterwards by ``check``, on the dataclasses."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, reason: str) -> NoReturn:
        raise ScenarioError(reason, source=self.source, path=path)

    def table(
        self, value: object, path: str, required: Sequence[str], optional: Sequence[str] = ()
    ) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(path, f"expected a table, got {describe_value(value)}")
        known = (*required, *optional)
        for key in value:
            if key not in known:
                self.fail(key_path(path, key), f"unknown key (expected one of: {', '.join(known)})")
        for key in required:
            if key not in value:
                self.fail(key_path(path, key), "missing (required)")
        return value

    def tables(self, value: object, path: str) -> list[object]:
        if not isinstance(value, list):
            self.fail(path, f"expected an array of tables, got {describe_value(value)}")
        return value

    def string(self, value: object, path: str) -> str:
        if not isinstance(value, str):
            self.fail(path, f"expected a string, got {describe_value(value)}")
        return value

    def integer(self, value: object, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"expected an integer, got {describe_value(value)}")
        return value

    def number(self, value: object, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(path, f"expected a number, got {describe_value(value)}")
        if not math.isfinite(value):
            self.fail(path, f"expected a finite number, got {value!r}")
        return float(value)

    def boolean(self, value: object, path: str) -> bool:
        if not isinstance(value, bool):
            self.fail(path, f"expected true or false, got {describe_value(value)}")
        return value

    def config(self, value: object, path: str) -> dict[str, ConfigValue]:
        if not isinstance(value, dict):
            self.fail(path, f"expected a table, got {describe_value(value)}")
        out: dict[str, ConfigValue] = {}
        for key, item in value.items():
            if not isinstance(item, (str, int, bool)):
                self.fail(
                    key_path(path, key),
                    f"expected a string, integer or boolean, got {describe_value(item)}",
                )
            out[key] = item
        return out

    def topic_configs(self, value: object, path: str) -> dict[str, str]:
        # Topic configs are strings (as Kafka's AlterConfigs carries them); numbers and
        # booleans are accepted in the file for convenience and written as text.
        return {
            key: str(item).lower() if isinstance(item, bool) else str(item)
            for key, item in self.config(value, path).items()
        }

    # -- sections -----------------------------------------------------------------------------

    def scenario(self, raw: dict[str, Any]) -> Scenario:
        t = self.table(
            raw,
            "",
            ("name", "expect", "cluster", "workload"),
            ("description", "faults", "seed_faults"),
        )
        faults = self.tables(t.get("faults", []), "faults")
        return Scenario(
            name=self.string(t["name"], "name"),
            description=self.string(t.get("description", ""), "description"),
            expect=self.string(t["expect"], "expect"),
            cluster=self.cluster(t["cluster"], "cluster"),
            workload=self.workload(t["workload"], "workload"),
            faults=tuple(self.fault(f, key_path("faults", i)) for i, f in enumerate(faults)),
            seed_faults=(
                self.seed_faults(t["seed_faults"], "seed_faults") if "seed_faults" in t else None
            ),
        )

    def cluster(self, value: object, path: str) -> ClusterSpec:
        t = self.table(
            value,
            path,
            ("topics",),
            ("brokers", "unclean_leader_election", "late_delivery", "broker_config"),
        )
        topics = self.tables(t["topics"], key_path(path, "topics"))
        return ClusterSpec(
            brokers=self.integer(t.get("brokers", 3), key_path(path, "brokers")),
            topics=tuple(
                self.topic(item, key_path(key_path(path, "topics"), i))
                for i, item in enumerate(topics)
            ),
            unclean_leader_election=self.boolean(
                t.get("unclean_leader_election", False), key_path(path, "unclean_leader_election")
            ),
            late_delivery=self.boolean(
                t.get("late_delivery", False), key_path(path, "late_delivery")
            ),
            broker_config=self.config(t.get("broker_config", {}), key_path(path, "broker_config")),
        )

    def topic(self, value: object, path: str) -> TopicSpec:
        t = self.table(
            value,
            path,
            ("name",),
            ("partitions", "replication_factor", "min_insync_replicas", "configs"),
        )
        return TopicSpec(
            name=self.string(t["name"], key_path(path, "name")),
            partitions=self.integer(t.get("partitions", 1), key_path(path, "partitions")),
            replication_factor=self.integer(
                t.get("replication_factor", 3), key_path(path, "replication_factor")
            ),
            min_insync_replicas=self.integer(
                t.get("min_insync_replicas", 2), key_path(path, "min_insync_replicas")
            ),
            configs=self.topic_configs(t.get("configs", {}), key_path(path, "configs")),
        )

    def workload(self, value: object, path: str) -> WorkloadSpec:
        t = self.table(
            value,
            path,
            ("producers", "duration_s"),
            ("consumers", "transformers", "settle_s", "client"),
        )
        producers = self.tables(t["producers"], key_path(path, "producers"))
        consumers = self.tables(t.get("consumers", []), key_path(path, "consumers"))
        transformers = self.tables(t.get("transformers", []), key_path(path, "transformers"))
        return WorkloadSpec(
            producers=tuple(
                self.producer(p, key_path(key_path(path, "producers"), i))
                for i, p in enumerate(producers)
            ),
            consumers=tuple(
                self.consumer(c, key_path(key_path(path, "consumers"), i))
                for i, c in enumerate(consumers)
            ),
            duration_s=self.number(t["duration_s"], key_path(path, "duration_s")),
            settle_s=self.number(t.get("settle_s", 20.0), key_path(path, "settle_s")),
            client=self.string(t.get("client", CLIENT_KAFKASIM), key_path(path, "client")),
            transformers=tuple(
                self.transformer(x, key_path(key_path(path, "transformers"), i))
                for i, x in enumerate(transformers)
            ),
        )

    def producer(self, value: object, path: str) -> ProducerSpec:
        t = self.table(
            value,
            path,
            ("name", "topic", "rate"),
            ("acks", "idempotent", "keyed", "config", *_PRODUCER_TXN_KEYS),
        )
        timeout = t.get("transaction_timeout_ms")
        pause_at = t.get("pause_at_s")
        return ProducerSpec(
            name=self.string(t["name"], key_path(path, "name")),
            topic=self.string(t["topic"], key_path(path, "topic")),
            acks=self.string(t.get("acks", "all"), key_path(path, "acks")),
            idempotent=self.boolean(t.get("idempotent", True), key_path(path, "idempotent")),
            rate=self.number(t["rate"], key_path(path, "rate")),
            keyed=self.boolean(t.get("keyed", False), key_path(path, "keyed")),
            config=self.config(t.get("config", {}), key_path(path, "config")),
            transactional=self.boolean(
                t.get("transactional", False), key_path(path, "transactional")
            ),
            transactional_id=self.string(
                t.get("transactional_id", ""), key_path(path, "transactional_id")
            ),
            transaction_records=self.integer(
                t.get("transaction_records", 10), key_path(path, "transaction_records")
            ),
            abort_every=self.integer(t.get("abort_every", 0), key_path(path, "abort_every")),
            transaction_timeout_ms=None
            if timeout is None
            else self.integer(timeout, key_path(path, "transaction_timeout_ms")),
            start_s=self.number(t.get("start_s", 0.0), key_path(path, "start_s")),
            pause_at_s=None
            if pause_at is None
            else self.number(pause_at, key_path(path, "pause_at_s")),
            pause_s=self.number(t.get("pause_s", 0.0), key_path(path, "pause_s")),
        )

    def consumer(self, value: object, path: str) -> ConsumerSpec:
        t = self.table(value, path, ("name", "topic"), ("isolation",))
        return ConsumerSpec(
            name=self.string(t["name"], key_path(path, "name")),
            topic=self.string(t["topic"], key_path(path, "topic")),
            isolation=self.string(
                t.get("isolation", READ_UNCOMMITTED), key_path(path, "isolation")
            ),
        )

    def transformer(self, value: object, path: str) -> TransformerSpec:
        t = self.table(
            value,
            path,
            ("name", "input", "output"),
            ("group", "transactional_id", "abort_every"),
        )
        return TransformerSpec(
            name=self.string(t["name"], key_path(path, "name")),
            input=self.string(t["input"], key_path(path, "input")),
            output=self.string(t["output"], key_path(path, "output")),
            group=self.string(t.get("group", ""), key_path(path, "group")),
            transactional_id=self.string(
                t.get("transactional_id", ""), key_path(path, "transactional_id")
            ),
            abort_every=self.integer(t.get("abort_every", 0), key_path(path, "abort_every")),
        )

    def fault(self, value: object, path: str) -> Fault:
        t = self.table(value, path, ("at_s", "action"), ("target", "duration_s", "params"))
        action = self.string(t["action"], key_path(path, "action"))
        spec = ACTIONS.get(action)
        if spec is None:
            self.fail(
                key_path(path, "action"),
                f"unknown action {action!r} (expected one of: {', '.join(ACTIONS)})",
            )
        duration = t.get("duration_s")
        return Fault(
            at_s=self.number(t["at_s"], key_path(path, "at_s")),
            action=action,
            target=self.string(t.get("target", ""), key_path(path, "target")),
            duration_s=None
            if duration is None
            else self.number(duration, key_path(path, "duration_s")),
            params=self.params(spec, t.get("params", {}), key_path(path, "params")),
        )

    def params(self, spec: ActionSpec, value: object, path: str) -> dict[str, Any]:
        names = [p.name for p in spec.params]
        if not names and isinstance(value, dict) and value:
            key = next(iter(value))
            self.fail(key_path(path, key), f"unknown key: {spec.name} takes no params")
        t = self.table(value, path, (), names)
        out: dict[str, Any] = {}
        for p in spec.params:
            where = key_path(path, p.name)
            if p.name not in t:
                if p.default is not None:
                    out[p.name] = p.default
                continue
            item = t[p.name]
            if p.kind is ParamKind.BOOL:
                out[p.name] = self.boolean(item, where)
            elif p.kind is ParamKind.NUMBER:
                out[p.name] = self.number(item, where)
            else:
                out[p.name] = self.groups(item, where)
        return out

    def groups(self, value: object, path: str) -> list[list[int]]:
        if not isinstance(value, list):
            self.fail(
                path, f"expected an array of arrays of broker ids, got {describe_value(value)}"
            )
        out: list[list[int]] = []
        for i, group in enumerate(value):
            if not isinstance(group, list):
                self.fail(
                    key_path(path, i),
                    f"expected an array of broker ids, got {describe_value(group)}",
                )
            out.append(
                [self.integer(b, key_path(key_path(path, i), j)) for j, b in enumerate(group)]
            )
        return out

    def seed_faults(self, value: object, path: str) -> RandomFaults:
        t = self.table(value, path, ("count", "actions", "window_s", "max_duration_s"))
        actions = t["actions"]
        if not isinstance(actions, list):
            self.fail(
                key_path(path, "actions"), f"expected an array, got {describe_value(actions)}"
            )
        window = t["window_s"]
        if not isinstance(window, list) or len(window) != 2:
            self.fail(
                key_path(path, "window_s"),
                f"expected [start, end] in seconds, got {describe_value(window)}"
                + (f" of {len(window)}" if isinstance(window, list) else ""),
            )
        return RandomFaults(
            count=self.integer(t["count"], key_path(path, "count")),
            actions=tuple(
                self.string(a, key_path(key_path(path, "actions"), i))
                for i, a in enumerate(actions)
            ),
            window_s=(
                self.number(window[0], key_path(key_path(path, "window_s"), 0)),
                self.number(window[1], key_path(key_path(path, "window_s"), 1)),
            ),
            max_duration_s=self.number(t["max_duration_s"], key_path(path, "max_duration_s")),
        )


# -- the catalog -----------------------------------------------------------------------------


def catalog() -> dict[str, Path]:
    """The shipped scenarios by name (the file's stem), in name order."""
    return {path.stem: path for path in sorted(CATALOG_DIR.glob("*.toml"))}


def find(name_or_path: str | Path) -> Path:
    """A scenario file: an existing path as given, else a catalog name."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    entries = catalog()
    if str(name_or_path) in entries:
        return entries[str(name_or_path)]
    if path.suffix == ".toml" or len(path.parts) > 1:
        raise ScenarioError("no such file", source=str(name_or_path))
    raise ScenarioError(
        f"no such scenario in the catalog ({', '.join(entries)}) and no such file",
        source=str(name_or_path),
    )
