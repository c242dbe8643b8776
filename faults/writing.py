"""Writing a scenario back as TOML (``tomli_w``); ``reading.parse(dump(s), ...) == s``. A shrunk
fault schedule is saved this way and replays with ``kafkasim sim run FILE --seed N``."""

from __future__ import annotations

import math
from typing import Any

import tomli_w

from kafkasim.faults.history import READ_UNCOMMITTED
from kafkasim.faults.scenario import (
    CLIENT_KAFKASIM,
    ConsumerSpec,
    Fault,
    ProducerSpec,
    Scenario,
    TransformerSpec,
)

__all__ = ["dump"]


def _finite(value: float, where: str) -> float:
    if not math.isfinite(value):
        raise ValueError(f"cannot write {where} = {value!r}: scenarios hold finite numbers only")
    return float(value)


def _params(fault: Fault, where: str) -> dict[str, Any]:
    return {
        key: _finite(value, f"{where}.params.{key}") if isinstance(value, float) else value
        for key, value in fault.params.items()
    }


def _fault(fault: Fault, where: str) -> dict[str, Any]:
    table: dict[str, Any] = {"at_s": _finite(fault.at_s, f"{where}.at_s"), "action": fault.action}
    if fault.target:
        table["target"] = fault.target
    if fault.duration_s is not None:
        table["duration_s"] = _finite(fault.duration_s, f"{where}.duration_s")
    if fault.params:
        table["params"] = _params(fault, where)
    return table


def _producer_txn(p: ProducerSpec) -> dict[str, Any]:
    """A producer's transaction keys, each only when set (a scenario without transactions is
    written as before them)."""
    defaults = ProducerSpec(p.name, p.topic)
    table: dict[str, Any] = {}
    for key in ("transactional", "transactional_id", "transaction_records", "abort_every",
                "transaction_timeout_ms", "start_s", "pause_at_s", "pause_s"):  # fmt: skip
        value = getattr(p, key)
        if value != getattr(defaults, key):
            table[key] = (
                _finite(value, f"producer {p.name}.{key}") if isinstance(value, float) else value
            )
    return table


def _consumer(c: ConsumerSpec) -> dict[str, Any]:
    table: dict[str, Any] = {"name": c.name, "topic": c.topic}
    if c.isolation != READ_UNCOMMITTED:
        table["isolation"] = c.isolation
    return table


def _transformer(t: TransformerSpec) -> dict[str, Any]:
    table: dict[str, Any] = {"name": t.name, "input": t.input, "output": t.output}
    if t.group:
        table["group"] = t.group
    if t.transactional_id:
        table["transactional_id"] = t.transactional_id
    if t.abort_every:
        table["abort_every"] = t.abort_every
    return table


def document(scenario: Scenario) -> dict[str, Any]:
    """The scenario as the TOML document's tables, every key written (defaults too) except the
    empty optional ones."""
    s = scenario
    cluster: dict[str, Any] = {
        "brokers": s.cluster.brokers,
        "unclean_leader_election": s.cluster.unclean_leader_election,
    }
    if s.cluster.late_delivery:  # written only when on: older files stay as they were
        cluster["late_delivery"] = True
    if s.cluster.broker_config:
        cluster["broker_config"] = dict(s.cluster.broker_config)
    topics = []
    for t in s.cluster.topics:
        topic: dict[str, Any] = {
            "name": t.name,
            "partitions": t.partitions,
            "replication_factor": t.replication_factor,
            "min_insync_replicas": t.min_insync_replicas,
        }
        if t.configs:
            topic["configs"] = dict(t.configs)
        topics.append(topic)
    if topics:
        cluster["topics"] = topics
    w = s.workload
    workload: dict[str, Any] = {
        "duration_s": _finite(w.duration_s, "workload.duration_s"),
        "settle_s": _finite(w.settle_s, "workload.settle_s"),
    }
    if w.client != CLIENT_KAFKASIM:
        workload["client"] = w.client
    producers = []
    for p in w.producers:
        producer: dict[str, Any] = {
            "name": p.name,
            "topic": p.topic,
            "acks": p.acks,
            "idempotent": p.idempotent,
            "rate": _finite(p.rate, f"producer {p.name}.rate"),
            "keyed": p.keyed,
        }
        if p.config:
            producer["config"] = dict(p.config)
        producer.update(_producer_txn(p))
        producers.append(producer)
    if producers:
        workload["producers"] = producers
    if w.consumers:
        workload["consumers"] = [_consumer(c) for c in w.consumers]
    if w.transformers:
        workload["transformers"] = [_transformer(t) for t in w.transformers]
    doc: dict[str, Any] = {
        "name": s.name,
        "description": s.description,
        "expect": s.expect,
        "cluster": cluster,
        "workload": workload,
    }
    if s.faults:
        doc["faults"] = [_fault(f, f"faults[{i}]") for i, f in enumerate(s.faults)]
    if s.seed_faults is not None:
        r = s.seed_faults
        doc["seed_faults"] = {
            "count": r.count,
            "actions": list(r.actions),
            "window_s": [_finite(r.window_s[0], "window_s"), _finite(r.window_s[1], "window_s")],
            "max_duration_s": _finite(r.max_duration_s, "seed_faults.max_duration_s"),
        }
    return doc


def dump(scenario: Scenario) -> str:
    """The scenario as TOML (descriptions with line breaks as multi-line strings)."""
    # A carriage return in a multi-line string would be read back as part of a line break
    # (TOML normalizes CRLF there): such a description is written on one line, escaped.
    return tomli_w.dumps(document(scenario), multiline_strings="\r" not in scenario.description)
