"""The README's Python example runs as written (on a temporary directory), and its table of
the Kafka APIs served is the one the brokers advertise."""

from __future__ import annotations

import re
from pathlib import Path
from typing import cast

from kio.schema.index import api_key_map

from kafkasim.node.apis import BrokerServices
from kafkasim.node.kafka_apis import KafkaProtocolApis, kafka_handler_tables

README = Path(__file__).resolve().parents[2] / "README.md"
API_TABLE = re.compile(r"<!-- kafka-api-versions -->\n(.*?)<!-- /kafka-api-versions -->", re.DOTALL)


BLOCK = re.compile(r"(?:<!-- readme-block: ([\w-]+) -->\n)?```(\w*)\n(.*?)```", re.DOTALL)
# The named python blocks that need a running cluster, run by
# tests/integration/test_readme_clients.py against a LocalCluster.
CLUSTER_PYTHON_BLOCKS = (
    "python-sync-producer-consumer",
    "python-group-consumer",
    "python-admin",
    "python-asyncio",
)


def readme_blocks(language: str) -> list[tuple[str | None, str]]:
    """Every fenced block of ``language`` in the README, in order, with the name of the
    ``<!-- readme-block: NAME -->`` marker right above it (None without one)."""
    return [
        (name or None, body)
        for name, lang, body in BLOCK.findall(README.read_text())
        if lang == language
    ]


def readme_block(name: str) -> str:
    """The body of the block marked ``<!-- readme-block: NAME -->``."""
    [body] = [body for found, _, body in BLOCK.findall(README.read_text()) if found == name]
    return body


# Every shell block of the README, by its marker, and the test that runs it. Where a command
# cannot run in a test, the test parses it with the real parser and says why.
SH_BLOCKS = {
    "dev": "test_readme_commands.py: the verbs are the dev script's (running them sets up a "
    "machine and runs every test)",
    "cluster": "test_readme_commands.py: up and status, then the others, then down",
    "cluster-broker": "test_readme_commands.py, on the cluster of the cluster block",
    "kafka-tools": "test_readme_commands.py, on the cluster of the cluster block",
    "kafka-flags": "test_cli_kafka_flags.py::test_readme_kafka_flags_block_runs",
    "kcat": "test_readme_commands.py, on the Kafka listener of the cluster block",
    "secured-cluster": "test_readme_commands.py: up, certificates, a topic, an ACL, alice's "
    "refused delete (alice.properties from the secured-alice-properties block), down",
    "failure-runs": "test_readme_commands.py: the simulated runs, check and show run; the sweeps "
    "(200 to 100 000 seeds, Spark), the real-process and compose chaos runs are parsed",
    "broker": "test_readme_commands.py, with the README's server.properties",
    "engine-tools": "test_readme_commands.py: all but the .txnindex line (parsed: the demo has "
    "no transactions)",
}


def test_every_shell_block_is_marked_and_run_by_a_test() -> None:
    blocks = readme_blocks("sh")
    unmarked = [body.splitlines()[0] for name, body in blocks if name is None]
    assert not unmarked, f"README sh blocks without a readme-block marker: {unmarked}"
    assert [name for name, _ in blocks] == list(SH_BLOCKS)


def test_every_named_python_block_is_run_by_the_cluster_test() -> None:
    named = [name for name, _ in readme_blocks("python") if name is not None]
    assert tuple(named) == CLUSTER_PYTHON_BLOCKS


def test_readme_python_example_runs(tmp_path: Path) -> None:
    blocks = [body for name, body in readme_blocks("python") if name is None]
    assert blocks, "README has no python example"
    for block in blocks:
        code = block.replace('"/tmp/logs/', f'"{tmp_path}/')
        namespace: dict[str, object] = {}
        exec(compile(code, str(README), "exec"), namespace)
        records = namespace["records"]
        assert [r.value for r in records] == [b"hello"]  # type: ignore[attr-defined]


class _NoBroker:
    """A broker whose every part is None: the handler tables are built, never called."""

    def __getattr__(self, name: str) -> None:
        return None


def kafka_api_table() -> str:
    """The README's "APIs and versions" table: every API a Kafka listener serves (its own
    handlers and every extra table, as the broker builds them), in api key order, as
    ApiVersions advertises it. Handlers are only looked up, never called: no broker needed."""
    no_broker = cast(BrokerServices, _NoBroker())
    apis = KafkaProtocolApis(no_broker, "KAFKA", kafka_handler_tables(no_broker))
    rows = ["| API | key | versions |", "|---|---:|---|"]
    for key, (low, high) in sorted(apis.versions.items()):
        name = "".join(word.capitalize() for word in api_key_map[key].split("_"))
        rows.append(f"| {name} | {key} | {low}-{high} |")
    return "\n".join(rows) + "\n"


def test_readme_kafka_api_table_is_what_the_brokers_advertise() -> None:
    found = API_TABLE.findall(README.read_text())
    assert len(found) == 1, "README needs one <!-- kafka-api-versions --> table"
    expected = kafka_api_table()
    assert found[0] == expected, (
        "README's Kafka API table is out of date; put this between its markers:\n" + expected
    )


def test_readme_cluster_commands_parse_with_the_real_parser() -> None:
    """Every `kafkasim cluster ...` line of the README's shell blocks is a command the CLI
    accepts as written (tests/integration/test_cli_cluster.py runs each verb)."""
    from kafkasim.cli.main import build_parser

    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.DOTALL)
    commands = [
        line.split("#")[0].split()[1:]
        for block in blocks
        for line in block.replace("\\\n", " ").splitlines()
        if line.startswith(".venv/bin/kafkasim cluster ")
    ]
    verbs = {argv[1] for argv in commands}
    assert {"up", "status", "down", "start", "stop", "kill", "pause", "resume", "logs"} <= verbs
    for argv in commands:
        build_parser().parse_args([arg for arg in argv if arg not in ("[--wipe]", "[-f]")])
