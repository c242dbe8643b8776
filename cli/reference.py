"""The reference pages under ``docs/``, generated from the declarations they describe, so that
they cannot drift from the code: every broker, topic, producer, consumer and admin key (the
``ConfigDef``\\ s the parsers use: type, default, valid values, doc, as Kafka's configuration
page) and the scenario language (the format in ``faults.scenario``'s docstring, every fault
action of ``faults.actions.ACTIONS``, the targets and the catalog).

``python -m kafkasim.cli.reference docs`` writes them; ``tests/unit/cli/test_reference.py``
fails when a committed page differs from what the code generates (and says this command).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from kafkasim.client.admin_config import ADMIN_CONFIG
from kafkasim.client.consumer_config import CONSUMER_CONFIG
from kafkasim.client.producer_config import PRODUCER_CONFIG
from kafkasim.common.config import ConfigDef, ConfigKey, ConfigType
from kafkasim.faults import scenario as scenario_module
from kafkasim.faults.actions import ACTIONS, ActionSpec, Duration, ParamKind, ParamSpec
from kafkasim.faults.reading import catalog, load
from kafkasim.node.config import BROKER_CONFIG_DEF
from kafkasim.storage.config import LOG_CONFIG_DEF

CONFIGURATION_PAGE = "configuration.md"
SCENARIOS_PAGE = "scenarios.md"
REGENERATE = "python -m kafkasim.cli.reference docs"

_SECTIONS: tuple[tuple[str, str, ConfigDef], ...] = (
    (
        "Broker configuration",
        "Keys of a broker's `server.properties` (`kafkasim broker --config FILE`, "
        "`--override key=value`; `broker_config` in a scenario). An unknown key is refused "
        "with INVALID_CONFIG naming it.",
        BROKER_CONFIG_DEF,
    ),
    (
        "Topic configuration",
        "Per-topic overrides (`kafkasim topics --create --config key=value`, "
        "`kafkasim configs --entity-type topics --alter --add-config ...`, CreateTopics and "
        "AlterConfigs from any Kafka client). Unset keys take the broker's default.",
        LOG_CONFIG_DEF,
    ),
    (
        "Producer configuration",
        "The config dict of kafkasim's `Producer` (and `--producer-property` of the tools).",
        PRODUCER_CONFIG,
    ),
    (
        "Consumer configuration",
        "The config dict of kafkasim's `Consumer` (and `--consumer-property` of the tools).",
        CONSUMER_CONFIG,
    ),
    (
        "Admin client configuration",
        "The config dict of kafkasim's `AdminClient` (and `SyncAdminClient`).",
        ADMIN_CONFIG,
    ),
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _default(key: ConfigKey) -> str:
    value = key.default
    if value is None:
        return "null"
    if key.type is ConfigType.BOOLEAN:
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value) if value else '""'
    if value == "":
        return '""'
    return str(value)


def valid_values(key: ConfigKey) -> str:
    """Kafka's "Valid Values" column: a range, the choices, or blank."""
    if key.choices is not None:
        return ", ".join(key.choices)
    if key.low is not None and key.high is not None:
        return f"[{_number(key.low)},...,{_number(key.high)}]"
    if key.low is not None:
        return f"[{_number(key.low)},...]"
    if key.high is not None:
        return f"[...,{_number(key.high)}]"
    return ""


def configuration_page() -> str:
    out = [
        "# Configuration reference",
        "",
        f"Generated from the code (`{REGENERATE}`); a test fails when it is out of date.",
        "",
    ]
    out += [f"- [{title}](#{title.lower().replace(' ', '-')})" for title, _, _ in _SECTIONS]
    for title, intro, definition in _SECTIONS:
        out += ["", f"## {title}", "", intro, ""]
        out += ["| Key | Type | Default | Valid values | Description |", "|---|---|---|---|---|"]
        for key in sorted(definition.keys.values(), key=lambda k: k.name):
            row = (
                f"`{key.name}`",
                key.type.value,
                f"`{_cell(_default(key))}`",
                _cell(valid_values(key)),
                _cell(key.doc),
            )
            out.append("| " + " | ".join(row) + " |")
    return "\n".join(out) + "\n"


def _scenario_format() -> str:
    """The commented example file of ``faults.scenario``'s docstring (one source for both)."""
    doc = scenario_module.__doc__ or ""
    start = doc.index("The file, every key")
    block_start = doc.index("::", start) + 2
    block_end = doc.index("The actions and what a runner does", block_start)
    lines = doc[block_start:block_end].strip("\n").splitlines()
    return "\n".join(line[4:] if line.startswith("    ") else line for line in lines).rstrip()


def _param(spec: ParamSpec) -> str:
    kind = {ParamKind.BOOL: "bool", ParamKind.NUMBER: "number", ParamKind.GROUPS: "[[ids]]"}
    parts = [f"`{spec.name}` ({kind[spec.kind]}"]
    if spec.required:
        parts.append(", required")
    if spec.default is not None:
        default = str(spec.default).lower() if isinstance(spec.default, bool) else spec.default
        parts.append(f", default {default}")
    if spec.low is not None or spec.high is not None:
        low = "" if spec.low is None else _number(spec.low)
        high = "" if spec.high is None else _number(spec.high)
        parts.append(f", {low}..{high}")
    return "".join(parts) + f"): {spec.doc}"


def action_lines(action: ActionSpec) -> list[str]:
    """One action as a Markdown section (also what ``kafkasim sim show`` would link)."""
    targets = sorted(kind.value for kind in action.targets)
    if action.no_target:
        targets.append('"" (none)')
    duration = {
        Duration.REQUIRED: "required",
        Duration.OPTIONAL: "optional (given: the broker comes back after it)",
        Duration.NONE: "none (an instant action)",
    }[action.duration]
    out = [f"### `{action.name}`", "", action.doc, ""]
    out.append(f"- targets: {', '.join(targets)}")
    out.append(f"- `duration_s`: {duration}")
    for spec in action.params:
        out.append(f"- param {_param(spec)}")
    return out


def scenarios_page() -> str:
    out = [
        "# Scenario reference",
        "",
        f"Generated from the code (`{REGENERATE}`); a test fails when it is out of date.",
        "",
        "A scenario is one TOML file: the cluster, the workload and the fault schedule. "
        "`kafkasim sim run NAME|FILE` runs it in the deterministic simulation, "
        "`kafkasim chaos run NAME|FILE` on real processes (or containers), "
        "`kafkasim sim show NAME` prints a catalog scenario's file. Times are seconds since the "
        "workload started; every mistake is reported with the key path (`faults[2].action`).",
        "",
        "## The file, every key",
        "",
        "```toml",
        _scenario_format(),
        "```",
        "",
        "## Targets",
        "",
        "| Target | Resolves to (when the fault fires) |",
        "|---|---|",
        "| `broker:N` | broker N (1..brokers) |",
        "| `leader:TOPIC-P` | the leader of partition P of TOPIC at that moment |",
        "| `follower:TOPIC-P` | a live follower of that partition, an in-sync one if any |",
        "| `controller` | the controller at that moment |",
        "| `random` | a live broker, drawn from the seed |",
        "| `all` | every broker (only the actions that accept it) |",
        "",
        "A target that resolves to no live broker skips the fault, and the run records it.",
        "",
        "## Fault actions",
    ]
    for action in ACTIONS.values():
        out += ["", *action_lines(action)]
    out += ["", "## The catalog", "", "| Name | Expect | What it shows |", "|---|---|---|"]
    for name, path in catalog().items():
        loaded = load(path)
        summary = loaded.description.strip().splitlines()[0] if loaded.description else ""
        out.append(f"| `{name}` | {loaded.expect} | {_cell(summary)} |")
    return "\n".join(out) + "\n"


PAGES: dict[str, Callable[[], str]] = {
    CONFIGURATION_PAGE: configuration_page,
    SCENARIOS_PAGE: scenarios_page,
}


def write(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, render in PAGES.items():
        path = directory / name
        path.write_text(render(), encoding="utf-8")
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1:
        print(f"usage: {REGENERATE.replace(' docs', '')} DIRECTORY", file=sys.stderr)
        return 2
    for path in write(Path(args[0])):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
