"""The examples section of each tool's ``--help`` (as the ``EXAMPLES`` of Kafka's tool docs).

Each example is a command line a user can paste (``--dir cluster`` is a ``kafkasim cluster
up`` directory; ``127.0.0.1:9092`` a bootstrap address) and a short comment. One table here
rather than an epilog in each tool's module: ``tests/unit/cli/test_examples.py`` parses every
line with the real parser, so an example cannot name a flag that does not exist, and a new
tool without examples fails that test.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

EXAMPLES: dict[str, tuple[tuple[str, str], ...]] = {
    "broker": (
        ("kafkasim broker --config server.properties", "run one broker"),
        (
            "kafkasim broker --config server.properties --override broker.id=2 "
            "--override log.dirs=/tmp/kafkasim-2",
            "the same file for a second broker",
        ),
    ),
    "cluster": (
        ("kafkasim cluster up --dir cluster --brokers 3", "ZooKeeper and 3 brokers on loopback"),
        ("kafkasim cluster status --dir cluster", "brokers, controller, leaders, ISR, HW"),
        ("kafkasim cluster down --dir cluster", "stop everything 'cluster up' started"),
    ),
    "dump-log": (
        (
            "kafkasim dump-log --files cluster/broker-1/events-0/00000000000000000000.log "
            "--print-data-log",
            "every batch and record of a segment",
        ),
        (
            "kafkasim dump-log --files cluster/broker-1/events-0/00000000000000000000.index "
            "--index-sanity-check",
            "check an offset index",
        ),
    ),
    "verify-log": (
        ("kafkasim verify-log cluster/broker-1", "check every partition of a log dir"),
        ("kafkasim verify-log cluster/broker-1/events-0", "check one partition"),
    ),
    "demo": (
        ("kafkasim demo storage --quick", "segments, indexes and recovery on one log"),
        ("kafkasim demo cluster", "replication and a leader crash on 3 brokers"),
    ),
    "console-producer": (
        ("kafkasim console-producer --dir cluster --topic events", "one record per stdin line"),
        (
            "kafkasim console-producer --bootstrap-server 127.0.0.1:9092 --topic events "
            "--property parse.key=true --property key.separator=: "
            "--producer-property acks=all",
            "key:value lines, acks=all",
        ),
    ),
    "console-consumer": (
        (
            "kafkasim console-consumer --dir cluster --topic events --from-beginning "
            "--timeout-ms 5000",
            "everything, then exit after 5 s without records",
        ),
        (
            "kafkasim console-consumer --dir cluster --topic events --group readers "
            "--property print.key=true --property print.offset=true",
            "as a member of a consumer group",
        ),
        (
            "kafkasim console-consumer --dir cluster --topic events --partition 0 --offset 42 "
            "--max-messages 10",
            "ten records of partition 0 from offset 42",
        ),
    ),
    "topics": (
        (
            "kafkasim topics --dir cluster --create --topic events --partitions 3 "
            "--replication-factor 3 --config min.insync.replicas=2",
            "a replicated topic",
        ),
        ("kafkasim topics --dir cluster --describe --topic events", "leaders, replicas, ISR"),
        (
            "kafkasim topics --dir cluster --describe --under-replicated-partitions",
            "partitions whose ISR lacks a replica",
        ),
    ),
    "transactions": (
        ("kafkasim transactions --dir cluster --list", "every transactional id, per coordinator"),
        (
            "kafkasim transactions --dir cluster --describe --transactional-id app-1",
            "one transaction's state and partitions",
        ),
        (
            "kafkasim transactions --dir cluster describe-producers --topic events "
            "--partition 0 --broker-id 2",
            "the producers broker 2's replica of events-0 remembers",
        ),
    ),
    "consumer-groups": (
        ("kafkasim consumer-groups --dir cluster --list", "every group"),
        ("kafkasim consumer-groups --dir cluster --describe --group readers", "offsets and lag"),
        (
            "kafkasim consumer-groups --dir cluster --reset-offsets --group readers "
            "--topic events --to-earliest --execute",
            "rewind a group (it must be empty)",
        ),
    ),
    "leader-election": (
        (
            "kafkasim leader-election --dir cluster --election-type preferred "
            "--all-topic-partitions",
            "move leaders back to preferred replicas",
        ),
        (
            "kafkasim leader-election --dir cluster --election-type unclean --topic events "
            "--partition 0",
            "elect an out-of-sync replica (may lose data)",
        ),
    ),
    "delete-records": (
        (
            "kafkasim delete-records --dir cluster --offset-json-file delete.json",
            'delete.json: {"partitions": [{"topic": "events", "partition": 0, "offset": 100}]}',
        ),
    ),
    "acls": (
        (
            "kafkasim acls --dir cluster --add --allow-principal User:alice --operation Read "
            "--topic events",
            "let alice read a topic",
        ),
        (
            "kafkasim acls --authorizer-properties zookeeper.connect=127.0.0.1:2181 --add "
            "--allow-principal User:bob --operation Write --topic orders- "
            "--resource-pattern-type prefixed",
            "bob may write every topic whose name starts with orders-",
        ),
        ("kafkasim acls --dir cluster --list", "every ACL of the cluster"),
        (
            "kafkasim acls --dir cluster --remove --force --topic events",
            "remove every ACL of a topic",
        ),
    ),
    "certs": (
        (
            "kafkasim certs create --dir certs --brokers 3 --clients alice,bob",
            "a throw-away CA, broker certificates and client certificates for alice and bob",
        ),
        (
            "kafkasim cluster up --tls --dir cluster",
            "a cluster with TLS (mutual) everywhere: it makes its own certificates",
        ),
        (
            "kafkasim topics --bootstrap-server 127.0.0.1:9092 --command-config client.properties "
            "--list",
            "client.properties: security.protocol=SSL, ssl.truststore.type=PEM, "
            "ssl.truststore.location=certs/ca.crt (and ssl.keystore.* for mutual TLS)",
        ),
    ),
    "configs": (
        (
            "kafkasim configs --dir cluster --describe --entity-type topics --entity-name events",
            "a topic's overrides",
        ),
        (
            "kafkasim configs --dir cluster --alter --entity-type topics --entity-name events "
            "--add-config retention.ms=600000,cleanup.policy=compact",
            "change two of them",
        ),
        (
            "kafkasim configs --dir cluster --alter --topic events --delete-config retention.ms",
            "back to the broker's default",
        ),
    ),
    "producer-perf-test": (
        (
            "kafkasim producer-perf-test --topic events --num-records 100000 --record-size 100 "
            "--throughput -1 --producer-props bootstrap.servers=127.0.0.1:9092 acks=all",
            "as fast as possible, acks=all",
        ),
    ),
    "sim": (
        ("kafkasim sim list", "the scenario catalog"),
        ("kafkasim sim show leader-crash", "a scenario's file"),
        ("kafkasim sim run leader-crash --seed 7 --report report.html", "one run and its report"),
        ("kafkasim sim sweep leader-crash --seeds 1..50", "random faults from 50 seeds"),
        (
            "kafkasim sim sweep all --seeds 1..1000 --spark --summary sweep.html "
            "--resume sweep.state",
            "the whole catalog on Spark, resumable, with a summary page",
        ),
        ("kafkasim sim run leader-crash --seed 7 --console", "step through the run in a browser"),
    ),
    "console": (
        ("kafkasim console --dir cluster", "watch a local cluster live; fault buttons"),
        (
            "kafkasim console --bootstrap 127.0.0.1:9093 --zookeeper 127.0.0.1:2181",
            "any brokers by their gRPC addresses",
        ),
        ("kafkasim console --replay history.jsonl", "replay a recorded run with a time slider"),
    ),
    "chaos": (
        ("kafkasim chaos run leader-crash", "the same scenario on real processes"),
        (
            "kafkasim chaos run leader-crash --client confluent-kafka",
            "with librdkafka as the producer and consumer",
        ),
    ),
    "consumer-perf-test": (
        (
            "kafkasim consumer-perf-test --dir cluster --topic events --messages 100000",
            "read 100,000 records and report the rate",
        ),
    ),
    "check": (
        ("kafkasim check history.jsonl", "judge a history written by a sim or chaos run"),
        ("kafkasim check history.jsonl --json", "the full report as JSON"),
    ),
}


def epilog(command: str) -> str:
    lines = ["examples:"]
    for line, comment in EXAMPLES[command]:
        lines += [f"  # {comment}", f"  {line}"]
    return "\n".join(lines)


def attach(subcommands: Mapping[str, argparse.ArgumentParser]) -> None:
    """Give every tool that has examples its examples section (kept verbatim: one per line)."""
    for name, parser in subcommands.items():
        if name in EXAMPLES:
            parser.epilog = epilog(name)
            parser.formatter_class = argparse.RawDescriptionHelpFormatter
