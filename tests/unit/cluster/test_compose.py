"""The parts of the chaos runner's compose backend (``cluster.compose``) that need no engine:
what it refuses and why, the override file that carries a scenario's broker settings into the
containers, and the brokers' configs in compose/docker-compose.yml (their listeners)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from kafkasim.cluster import chaos, compose
from kafkasim.cluster.container_net import filtering_refusal
from kafkasim.common.config import DEV_ZK_SESSION_TIMEOUT_MS
from kafkasim.faults.actions import ACTIONS
from kafkasim.faults.backend import UnsupportedFaultError, check_supported, unsupported_faults
from kafkasim.faults.reading import catalog, find, load
from kafkasim.faults.scenario import Fault
from kafkasim.node.config import BrokerConfig

# Everything in the catalog whose faults are crashes, pauses, shutdowns or isolations.
RUNNABLE = {
    "leader-isolation",
    "leader-isolation-late",  # late delivery is the simulation's; containers' TCP does it
    "leader-crash",
    "follower-pause",
    "controller-crash",
    "rolling-restart",
    "kip101-case1",
    "unsafe-unclean-election",  # an isolated follower, then the leader crashed
    "txn-zombie-fenced",  # a paused follower; a producer stalls (the workload does it)
    # As root on the host, the link faults (DROP rules inside the containers) too:
    "leader-partition",
    "leader-zk-isolation",
    "follower-one-way",
    "unsafe-acks1-leader-crash",
}
# The spec as root (the link faults injected) and without (refused), on any machine.
AS_ROOT = compose.compose_spec_for(None, "delaying needs tc netem in the host's kernel")
NOT_ROOT = compose.compose_spec_for(
    "network namespaces need root, and this process runs as uid 1000",
    "delaying needs tc netem in the host's kernel",
)


def test_every_action_is_either_injected_or_refused_with_a_reason() -> None:
    spec = compose.COMPOSE
    assert spec.injectable.isdisjoint(spec.not_injectable)
    assert spec.injectable | set(spec.not_injectable) == set(ACTIONS)
    assert all(reason and "\n" not in reason for reason in spec.not_injectable.values())
    assert "isolate" in spec.injectable
    assert {"slow_network", "slow_one_way", "expire_session"} <= set(spec.not_injectable)
    assert ("split" in spec.injectable) == (filtering_refusal() is None)
    assert {"disk_full", "clock_jump"} <= set(spec.not_injectable)


@pytest.mark.parametrize("name", sorted(catalog()))
def test_the_catalog_runs_or_is_refused_naming_the_compose_cluster(name: str) -> None:
    chosen = load(find(name))
    clauses = unsupported_faults(chosen, AS_ROOT)
    assert (name in RUNNABLE) == (not clauses), clauses
    if not clauses:
        check_supported(chosen, AS_ROOT)
        return
    with pytest.raises(UnsupportedFaultError) as caught:
        check_supported(chosen, AS_ROOT)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"scenario {name}: the compose cluster cannot inject ")


def test_without_root_isolate_is_injected_but_split_and_a_power_cut_are_refused() -> None:
    base = load(find("leader-crash"))
    faults = (
        Fault(1.0, "isolate", "leader:events-0", 5.0),
        Fault(2.0, "split", "broker:1", 1.0),
        Fault(3.0, "crash", "broker:3", 1.0, {"lose_unflushed": True}),
        Fault(4.0, "isolate_zk", "broker:2", 1.0),
    )
    clauses = unsupported_faults(replace(base, faults=faults), NOT_ROOT)
    assert [c.split(":", 1)[0] for c in clauses] == [
        "split (faults[1])",
        "crash with lose_unflushed (faults[2])",
        "isolate_zk (faults[3])",
    ]
    assert "docker kill" in clauses[1]
    assert "needs nsenter and iptables: network namespaces need root" in clauses[0]
    # As root, only the power cut.
    (clause,) = unsupported_faults(replace(base, faults=faults), AS_ROOT)
    assert clause.startswith("crash with lose_unflushed (faults[2])")
    # The same scenario on local processes refuses the isolation too.
    assert unsupported_faults(replace(base, faults=faults), chaos.LOCAL)[0].startswith("isolate")


def test_a_scenario_without_three_brokers_is_refused() -> None:
    base = load(find("leader-crash"))
    five = replace(base, cluster=replace(base.cluster, brokers=5))
    with pytest.raises(UnsupportedFaultError) as caught:
        check_supported(five, compose.COMPOSE)
    assert str(caught.value) == (
        f"scenario {base.name}: the compose cluster cannot run cluster.brokers = 5: "
        "the compose file has brokers 1, 2 and 3"
    )
    check_supported(five, chaos.LOCAL)  # local processes run any number


def test_broker_settings_become_kafkasim_cfg_variables() -> None:
    env = compose.config_environment(
        {
            "replica.lag.time.max.ms": 5000,
            "unclean.leader.election.enable": False,
            "auto.create.topics.enable": True,
            "log.message.format.version": "2.8",
        }
    )
    assert env == {
        "KAFKASIM_CFG_REPLICA_LAG_TIME_MAX_MS": "5000",
        "KAFKASIM_CFG_UNCLEAN_LEADER_ELECTION_ENABLE": "false",
        "KAFKASIM_CFG_AUTO_CREATE_TOPICS_ENABLE": "true",
        "KAFKASIM_CFG_LOG_MESSAGE_FORMAT_VERSION": "2.8",
    }
    for bad in ("has_underscore", "Upper.case", "trailing.", ""):
        with pytest.raises(ValueError, match="KAFKASIM_CFG_"):
            compose.config_environment({bad: 1})


def test_the_override_gives_every_broker_the_scenarios_settings_and_no_restart_policy() -> None:
    chosen = load(find("follower-pause"))
    text = compose.render_override(compose.chaos_broker_props(chosen), scenario=chosen.name)
    lines = text.splitlines()
    assert lines[0].startswith("# Generated by kafkasim chaos for scenario follower-pause")
    assert lines[1] == "services:"
    for broker_id in (1, 2, 3):
        at = lines.index(f"  broker-{broker_id}:")
        assert lines[at + 1 : at + 3] == ['    restart: "no"', "    environment:"]
    # The scenario's own setting wins over the runner's default (6000), as for local runs.
    assert text.count('      KAFKASIM_CFG_ZOOKEEPER_SESSION_TIMEOUT_MS: "18000"\n') == 3
    assert text.count('      KAFKASIM_CFG_REPLICA_LAG_TIME_MAX_MS: "5000"\n') == 3
    assert text.count('      KAFKASIM_CFG_UNCLEAN_LEADER_ELECTION_ENABLE: "false"\n') == 3
    assert text.count('      KAFKASIM_CFG_AUTO_CREATE_TOPICS_ENABLE: "false"\n') == 3
    default = compose.chaos_broker_props(load(find("leader-partition")))
    assert default["zookeeper.session.timeout.ms"] == DEV_ZK_SESSION_TIMEOUT_MS


def test_a_value_that_yaml_would_misread_stays_a_string() -> None:
    text = compose.render_override({"some.key": 'a: "b" # c'}, scenario="s", brokers=(1,))
    assert '      KAFKASIM_CFG_SOME_KEY: "a: \\"b\\" # c"' in text.splitlines()


# -- the brokers' configs in compose/docker-compose.yml ------------------------------------------

_BLOCK = re.compile(r"^(x-[\w-]+):|^  ([\w-]+):$")
_ENV = re.compile(r"^\s+KAFKASIM_CFG_([A-Z0-9_]+): (.+)$")
_PUBLISHED = re.compile(r"^\s+- (\S+:\d+):(\d+)$")
_DEFAULT = re.compile(r"\$\{[A-Z0-9_]+:-([^}]*)\}")


def compose_service(service: str) -> tuple[dict[str, object], dict[int, str]]:
    """The broker keys ``service`` renders (compose/broker-entrypoint.sh's rule, every
    ``${VAR:-x}`` at its default) and its published ports {container port: host address}. The
    file is ours and plain (one key per line; the shared environment in ``x-broker-env``), so
    it is read line by line: no YAML parser is installed."""
    blocks: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in compose.COMPOSE_FILE.read_text().splitlines():
        head = _BLOCK.match(line)
        if head:
            lines = blocks.setdefault(head.group(1) or head.group(2), [])
        else:
            lines.append(_DEFAULT.sub(r"\1", line))
    props: dict[str, object] = {}
    published: dict[int, str] = {}
    for line in blocks["x-broker-env"] + blocks[service]:
        if found := _ENV.match(line):
            value = found.group(2).strip("'\"").replace("{hostname}", service)
            props[found.group(1).lower().replace("_", ".")] = value
        elif found := _PUBLISHED.match(line):
            published[int(found.group(2))] = found.group(1)
    return props, published


def _compose_broker(service: str) -> tuple[BrokerConfig, dict[int, str]]:
    props, published = compose_service(service)
    return BrokerConfig.from_props(props), published


@pytest.mark.parametrize("broker_id", compose.BROKER_IDS)
def test_compose_brokers_serve_kafka_clients_on_the_host_at_the_address_they_advertise(
    broker_id: int,
) -> None:
    config, published = _compose_broker(f"broker-{broker_id}")
    assert config.wire_protocols == {
        "INTERNAL": "grpc",
        "EXTERNAL": "grpc",
        "KAFKA_INTERNAL": "kafka",
        "KAFKA_EXTERNAL": "kafka",
        "REPLICATION": "replication",
    }
    assert config.inter_broker_listener == "INTERNAL"
    advertised = config.advertised_listeners
    # A client on the host is told the address it reached the listener by: the published one.
    for name in ("EXTERNAL", "KAFKA_EXTERNAL"):
        host, port = advertised[name]
        assert published[config.listeners[name][1]] == f"{host}:{port}"
    assert advertised["KAFKA_INTERNAL"] == (f"broker-{broker_id}.cluster", 9094)
    assert set(published) == {
        config.listeners["EXTERNAL"][1],
        config.listeners["KAFKA_EXTERNAL"][1],
        config["metrics.port"],
    }


@pytest.mark.parametrize("broker_id", compose.BROKER_IDS)
def test_compose_brokers_publish_their_metrics_on_loopback_one_port_each(broker_id: int) -> None:
    """GET /metrics of broker N on the host at 127.0.0.1:3909(N+1), as the Kafka listeners'
    29092-29094: loopback only, one host port per broker."""
    config, published = _compose_broker(f"broker-{broker_id}")
    assert config["metrics.port"] == 9404
    assert published[9404] == f"127.0.0.1:{39091 + broker_id}"


def test_scaled_compose_brokers_serve_metrics_inside_the_network_only() -> None:
    config, published = _compose_broker("broker")
    assert config["metrics.port"] == 9404 and published == {}


def test_scaled_compose_brokers_have_the_internal_listeners_only() -> None:
    config, published = _compose_broker("broker")
    assert config.wire_protocols == {
        "INTERNAL": "grpc",
        "KAFKA_INTERNAL": "kafka",
        "REPLICATION": "replication",
    }
    assert config.advertised_listeners["KAFKA_INTERNAL"] == ("broker", 9094)
    # A leader among them serves its followers as brokers 1-3 do (every broker needs it).
    assert config.replica_fetch_listener == "REPLICATION"
    assert config.advertised_listeners["REPLICATION"] == ("broker", 9096)
    assert published == {}


@pytest.mark.parametrize("broker_id", compose.BROKER_IDS)
def test_compose_followers_fetch_from_a_replication_listener_on_the_cluster_network(
    broker_id: int,
) -> None:
    """As ``cluster up``'s brokers: followers fetch over framed TCP (node.rpc_framed), from the
    leader's REPLICATION listener, advertised under the name only the network "cluster" knows
    and not published to the host."""
    config, published = _compose_broker(f"broker-{broker_id}")
    assert config.replica_fetch_listener == "REPLICATION"
    assert config.advertised_listeners["REPLICATION"] == (f"broker-{broker_id}.cluster", 9096)
    assert config.listeners["REPLICATION"][1] == 9096 not in published
    assert config.security_protocols["REPLICATION"] == "PLAINTEXT"


def test_every_broker_port_variable_is_one_the_compose_file_publishes_by() -> None:
    grpc, kafka, metrics = compose.free_broker_ports()
    assert len({*grpc.values(), *kafka.values(), *metrics.values()}) == 3 * len(compose.BROKER_IDS)
    env = compose.port_environment(grpc, kafka, metrics)
    assert env["KAFKASIM_BROKER_2_KAFKA_PORT"] == str(kafka[2])
    assert env["KAFKASIM_BROKER_2_PORT"] == str(grpc[2])
    assert env["KAFKASIM_BROKER_2_METRICS_PORT"] == str(metrics[2])
    text = compose.COMPOSE_FILE.read_text()
    assert all(f"${{{name}:-" in text for name in env)
    cluster = compose.ComposeCluster("docker-compose", [], "p", grpc, kafka)
    assert cluster.kafka_bootstrap == ",".join(f"127.0.0.1:{kafka[b]}" for b in compose.BROKER_IDS)
