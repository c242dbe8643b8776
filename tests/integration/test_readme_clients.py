"""The README's Python client examples (sync producer and consumer, group consumer, admin,
asyncio) run as written, in order, against a real cluster: one broker of a ``LocalCluster``,
its address put where the README says ``127.0.0.1:9092``."""

from __future__ import annotations

import contextlib
import io
import threading
from pathlib import Path

from tests.cli_run import local_cluster
from tests.unit.test_readme import CLUSTER_PYTHON_BLOCKS, README, readme_blocks


def run_block(code: str, bootstrap: str) -> tuple[dict[str, object], list[str]]:
    """Execute one README block; its namespace and the lines it printed."""
    namespace: dict[str, object] = {"__name__": "__readme__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.replace("127.0.0.1:9092", bootstrap), str(README), "exec"), namespace)
    return namespace, out.getvalue().splitlines()


def test_the_readme_client_examples_run_against_a_cluster(tmp_path: Path) -> None:
    blocks = dict(readme_blocks("python"))
    props: dict[str, object] = {
        "offsets.topic.replication.factor": 1,
        "offsets.topic.num.partitions": 1,
    }
    with local_cluster(tmp_path, brokers=1, broker_props=props) as cluster:
        bootstrap = ",".join(cluster.bootstrap)
        results = {name: run_block(blocks[name], bootstrap) for name in CLUSTER_PYTHON_BLOCKS}

    namespace, printed = results["python-sync-producer-consumer"]
    assert printed[0] == "[0, 1, 2]"
    assert namespace["orders"] == [{"id": i, "qty": 2} for i in range(3)]

    namespace, printed = results["python-group-consumer"]
    assert sorted(namespace["seen"]) == [0, 1, 2]  # type: ignore[call-overload]
    assert printed == ["[0, 1, 2] {TopicPartition(topic='orders', partition=0)}"]

    _, printed = results["python-admin"]
    assert printed[0].startswith("(BrokerNode(node_id=1, host='127.0.0.1'")
    assert printed[1] == "[('billing', 'Empty')]"  # the group consumer left
    assert printed[2] == "{TopicPartition(topic='orders', partition=0): 3}"

    _, printed = results["python-asyncio"]
    assert printed[0] == str(["__consumer_offsets", "orders", "payments"])
    assert printed[-1] == "['hello']"
    # Every blocking client closed its loop thread.
    assert not [t for t in threading.enumerate() if t.name.startswith("kafkasim-")]
