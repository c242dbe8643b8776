"""The generated message code matches the .proto, and the method table covers every rpc."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kafkasim import proto
from kafkasim.proto import METHODS, MethodSpec, check_servable, kafkasim_pb2, method_spec
from kafkasim.proto.generate import GENERATED_FILES, PROTO_FILE, REPO_ROOT, generate

_RPC = re.compile(
    r"rpc\s+(\w+)\s*\(\s*(stream\s+)?(\w+)\s*\)\s*returns\s*\(\s*(stream\s+)?(\w+)\s*\)"
)
_SERVICE = re.compile(r"service\s+(\w+)\s*\{(.*?)\n\}", re.DOTALL)


def _rpcs_in_proto_text() -> list[tuple[str, str, bool, str, bool]]:
    """(full method name, request, client streaming, response, server streaming), by regex on
    the .proto text, independently of protoc."""
    text = (REPO_ROOT / PROTO_FILE).read_text(encoding="utf-8")
    text = re.sub(r"//[^\n]*", "", text)
    package = re.search(r"package\s+([\w.]+)\s*;", text)
    assert package is not None
    found = []
    for service, body in _SERVICE.findall(text):
        for name, cstream, request, sstream, response in _RPC.findall(body):
            full = f"/{package.group(1)}.{service}/{name}"
            found.append((full, request, bool(cstream), response, bool(sstream)))
    return found


def _constant_name(method: str) -> str:
    """``/kafkasim.Kafkasim/ListOffsets`` -> ``METHOD_LIST_OFFSETS``."""
    short = method.rsplit("/", 1)[1]
    return "METHOD_" + re.sub(r"(?<!^)(?=[A-Z])", "_", short).upper()


def test_committed_generated_files_match_a_fresh_generation(tmp_path: Path) -> None:
    """Regenerating must reproduce the committed files byte for byte, so they cannot drift."""
    generate(tmp_path)
    for name in GENERATED_FILES:
        fresh = (tmp_path / name).read_bytes()
        committed = (REPO_ROOT / name).read_bytes()
        assert fresh == committed, f"{name} is stale: run python -m kafkasim.proto.generate"


def test_every_rpc_of_the_proto_has_a_constant_and_a_method_spec() -> None:
    rpcs = _rpcs_in_proto_text()
    assert len(rpcs) == 40  # the three services of proto/kafkasim.proto
    for full, request, client_streaming, response, server_streaming in rpcs:
        constant = _constant_name(full)
        assert getattr(proto, constant, None) == full, f"missing proto.{constant} = {full!r}"
        assert constant in proto.__all__
        spec = METHODS[full]
        assert spec == MethodSpec(
            name=full,
            request_cls=getattr(kafkasim_pb2, request),
            response_cls=getattr(kafkasim_pb2, response),
            client_streaming=client_streaming,
            server_streaming=server_streaming,
        )
    assert set(METHODS) == {full for full, *_ in rpcs}


def test_no_constant_names_a_method_that_does_not_exist() -> None:
    constants = {name: value for name, value in vars(proto).items() if name.startswith("METHOD_")}
    assert sorted(constants.values()) == sorted(METHODS)


def test_method_spec_names_the_service_and_the_method() -> None:
    spec = METHODS[proto.METHOD_REPLICA_FETCH]
    assert (spec.service, spec.short_name) == ("kafkasim.Replication", "ReplicaFetch")
    assert spec.is_bidi_stream
    assert not spec.is_unary


@pytest.mark.parametrize(
    ("name", "streaming", "found"),
    [
        (proto.METHOD_PRODUCE, False, True),
        (proto.METHOD_PRODUCE, True, False),
        (proto.METHOD_REPLICA_FETCH, True, True),
        (proto.METHOD_REPLICA_FETCH, False, False),
        ("/kafkasim.Kafkasim/NoSuchMethod", False, False),
    ],
)
def test_method_spec_finds_only_the_requested_kind(name: str, streaming: bool, found: bool) -> None:
    assert (method_spec(name, streaming=streaming) is not None) == found


def test_check_servable_rejects_a_handler_of_the_wrong_kind() -> None:
    check_servable([proto.METHOD_PRODUCE], [proto.METHOD_REPLICA_FETCH])
    with pytest.raises(ValueError, match="ReplicaFetch"):
        check_servable([proto.METHOD_REPLICA_FETCH], [])
    with pytest.raises(ValueError, match="Nope"):
        check_servable([], ["/kafkasim.Kafkasim/Nope"])


def test_message_type_checks_name_the_expected_type() -> None:
    spec = METHODS[proto.METHOD_PRODUCE]
    spec.check_request(kafkasim_pb2.ProduceRequest())
    with pytest.raises(TypeError, match="takes ProduceRequest, got FetchRequest"):
        spec.check_request(kafkasim_pb2.FetchRequest())
    response = kafkasim_pb2.ProduceResponse()
    assert spec.check_response(response) is response
    with pytest.raises(TypeError, match="must answer ProduceResponse"):
        spec.check_response(None)
