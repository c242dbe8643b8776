"""Config declarations: one ``ConfigKey`` per key (name, type, default, doc, valid range).

A ``ConfigDef`` parses a mapping of raw values (strings from a ``.properties`` file or typed
Python values) into a frozen ``Config``. Unknown keys and out-of-range values raise
``InvalidConfigError`` naming the key, as Kafka's ``ConfigException`` does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from kafkasim.common.errors import InvalidConfigError
from kafkasim.common.sentinels import INT32_MAX, INT64_MAX

DEV_ZK_SESSION_TIMEOUT_MS: Final = 6000
"""``zookeeper.session.timeout.ms`` of the project's own clusters' brokers (local processes,
docker-compose, the simulation, and so of every failure scenario) unless they set one: Kafka
0.9's default, a third of today's 18 s, so that a crashed broker's session ends, and its
partitions fail over, within seconds in demos and tests."""


class ConfigType(Enum):
    INT = "int"
    LONG = "long"
    DOUBLE = "double"
    BOOLEAN = "boolean"
    STRING = "string"
    LIST = "list"


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One declared key. ``low``/``high`` bound numbers; ``choices`` bound strings and lists."""

    name: str
    type: ConfigType
    default: Any
    doc: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None

    def parse(self, raw: object) -> Any:
        value = _coerce(self, raw)
        self.validate(value)
        return value

    def validate(self, value: Any) -> None:
        if value is None:
            return
        if self.type in (ConfigType.INT, ConfigType.LONG, ConfigType.DOUBLE):
            if self.low is not None and value < self.low:
                raise InvalidConfigError(
                    f"Invalid value {value} for configuration {self.name}: "
                    f"Value must be at least {_fmt(self.low)}"
                )
            if self.high is not None and value > self.high:
                raise InvalidConfigError(
                    f"Invalid value {value} for configuration {self.name}: "
                    f"Value must be no more than {_fmt(self.high)}"
                )
        if self.choices is not None:
            items = value if isinstance(value, list) else [value]
            for item in items:
                if item not in self.choices:
                    raise InvalidConfigError(
                        f"Invalid value {item} for configuration {self.name}: "
                        f"String must be one of: {', '.join(self.choices)}"
                    )


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _coerce(key: ConfigKey, raw: object) -> Any:
    if raw is None:
        return None
    t = key.type
    try:
        if t in (ConfigType.INT, ConfigType.LONG):
            if isinstance(raw, bool):
                raise TypeError
            if isinstance(raw, int):
                value = raw
            elif isinstance(raw, str):
                value = int(raw.strip())
            else:
                raise TypeError
            limit = INT32_MAX if t is ConfigType.INT else INT64_MAX
            if not -limit - 1 <= value <= limit:
                raise InvalidConfigError(
                    f"Invalid value {raw} for configuration {key.name}: "
                    f"Not a number of type {t.value.upper()}"
                )
            return value
        if t is ConfigType.DOUBLE:
            if isinstance(raw, bool):
                raise TypeError
            value_f = float(raw) if isinstance(raw, (int, float, str)) else math.nan
            if math.isnan(value_f):
                raise TypeError
            return value_f
        if t is ConfigType.BOOLEAN:
            if isinstance(raw, bool):
                return raw
            if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
                return raw.strip().lower() == "true"
            raise TypeError
        if t is ConfigType.STRING:
            if not isinstance(raw, str):
                raise TypeError
            return raw.strip()
        if t is ConfigType.LIST:
            if isinstance(raw, str):
                return [p.strip() for p in raw.split(",") if p.strip()]
            if isinstance(raw, (list, tuple)):
                return [str(p).strip() for p in raw]
            raise TypeError
    except (TypeError, ValueError):
        raise InvalidConfigError(
            f"Invalid value {raw!r} for configuration {key.name}: "
            f"Expected value to be of type {t.value.upper()}"
        ) from None
    raise AssertionError(t)  # pragma: no cover


@dataclass(frozen=True)
class Config:
    """Parsed, frozen values. ``config[name]`` or ``config.get(name)``; ``originals`` as given."""

    definition: ConfigDef
    values: Mapping[str, Any]
    originals: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise InvalidConfigError(f"Unknown configuration {name!r}") from None

    def get(self, name: str) -> Any:
        return self[name]

    def is_set(self, name: str) -> bool:
        """Whether the user gave this key (rather than it taking its default)."""
        return name in self.originals


class ConfigDef:
    """A set of declared keys plus cross-field rules checked at load."""

    def __init__(
        self,
        keys: Iterable[ConfigKey],
        *,
        rules: Iterable[Callable[[Config], None]] = (),
        kind: str = "configuration",
    ) -> None:
        self.keys: dict[str, ConfigKey] = {}
        for key in keys:
            if key.name in self.keys:
                raise ValueError(f"config key declared twice: {key.name}")
            key.validate(key.default)
            self.keys[key.name] = key
        self.rules = tuple(rules)
        self.kind = kind

    def names(self) -> list[str]:
        return sorted(self.keys)

    def parse(self, raw: Mapping[str, object], *, allow_unknown: bool = False) -> Config:
        unknown = sorted(k for k in raw if k not in self.keys)
        if unknown and not allow_unknown:
            raise InvalidConfigError(
                f"Unknown {self.kind} key{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}"
            )
        values: dict[str, Any] = {}
        originals: dict[str, Any] = {}
        for name, key in self.keys.items():
            if name in raw:
                values[name] = key.parse(raw[name])
                originals[name] = raw[name]
            else:
                values[name] = key.default
        config = Config(self, MappingProxyType(values), MappingProxyType(originals))
        for rule in self.rules:
            rule(config)
        return config

    def defaults(self) -> Config:
        return self.parse({})


def read_properties(path: Path) -> dict[str, str]:
    """Read a Java-style ``.properties`` file (``key=value`` or ``key: value``, ``#`` comments)."""
    props: dict[str, str] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        for sep in ("=", ":"):
            if sep in stripped:
                k, _, v = stripped.partition(sep)
                props[k.strip()] = v.strip()
                break
        else:
            raise InvalidConfigError(f"{path}:{lineno}: expected key=value, got {stripped!r}")
    return props
