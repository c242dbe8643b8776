"""Incremental topic config changes (Kafka's IncrementalAlterConfigs), as a pure function.

Values in, values out: the topic's current overrides (``/config/topics/<t>``) and the
requested operations give the new overrides, or an error naming what is wrong. The broker
serving the change (``node.topic_config_admin``) reads, calls :func:`apply_incremental_ops`,
and writes the result with a config change notification; nothing here does IO.

Rules (Kafka's ``prepareIncrementalConfigs`` and ``LogConfig.validate``):

1. a key may appear once per resource (else INVALID_REQUEST);
2. every key must be a topic config (else INVALID_CONFIG naming it);
3. SET replaces the override; DELETE removes it (the broker default applies again);
4. APPEND and SUBTRACT are for list keys only (else INVALID_REQUEST naming the key and the
   operation); they start from the override, or the key's default when there is none;
5. the resulting overrides must parse (types, ranges, choices, cross-key rules), else
   INVALID_CONFIG naming the key and the value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from kafkasim.common.config import ConfigDef, ConfigType
from kafkasim.common.errors import InvalidConfigError, InvalidRequestError
from kafkasim.storage.config import LOG_CONFIG_DEF


class OpType(IntEnum):
    """Kafka's ``AlterConfigOp.OpType`` numbers."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """One operation on one key (``value`` unused by DELETE). ``op`` is a raw number, so that
    an unknown one is refused by :func:`apply_incremental_ops`, naming it."""

    name: str
    op: int
    value: str = ""


def apply_incremental_ops(
    current: Mapping[str, str],
    ops: Sequence[AlterConfigOp],
    config_def: ConfigDef = LOG_CONFIG_DEF,
) -> dict[str, str]:
    """The overrides after ``ops`` (see the module's rules); ``current`` is not changed."""
    names = [op.name for op in ops]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidRequestError(f"Error due to duplicate config keys: {', '.join(duplicates)}")
    updated = dict(current)
    for op in ops:
        key = config_def.keys.get(op.name)
        if key is None:
            raise InvalidConfigError(f"Unknown topic config name: {op.name}")
        try:
            op_type = OpType(op.op)
        except ValueError:
            raise InvalidRequestError(
                f"Unknown config operation {op.op} for config key: {op.name}"
            ) from None
        if op_type is OpType.SET:
            updated[op.name] = op.value
        elif op_type is OpType.DELETE:
            updated.pop(op.name, None)
        else:
            if key.type is not ConfigType.LIST:
                verb = "append" if op_type is OpType.APPEND else "subtract"
                raise InvalidRequestError(
                    f"Config value {verb} is not allowed for config key: {op.name}"
                )
            old = updated.get(op.name)
            items = _split(old) if old is not None else [str(v) for v in key.default or ()]
            given = _split(op.value)
            if op_type is OpType.APPEND:
                items += [v for v in given if v not in items]
            else:
                items = [v for v in items if v not in given]
            updated[op.name] = ",".join(items)
    config_def.parse(updated)  # InvalidConfigError naming the key and value
    return updated


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]
