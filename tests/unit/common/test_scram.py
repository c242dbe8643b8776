"""SCRAM as Kafka's: RFC 7677's SHA-256 exchange, bad proofs, unknown users, replayed
messages, nonces not the exchange's, and the stored credential text."""

from __future__ import annotations

import base64

import pytest

from kafkasim.common.scram import (
    INVALID_CREDENTIALS,
    MECHANISMS,
    ScramClient,
    ScramCredential,
    ScramError,
    ScramServer,
    credential_from_password,
    decode_credential,
    encode_credential,
    mechanism,
    password_matches,
)

SHA256 = MECHANISMS["SCRAM-SHA-256"]
SHA512 = MECHANISMS["SCRAM-SHA-512"]
# RFC 7677, section 3.
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_credential() -> ScramCredential:
    return credential_from_password(SHA256, "pencil", 4096, salt=RFC_SALT)


def lookup(users: dict[str, ScramCredential]):  # type: ignore[no-untyped-def]
    return users.get


def test_the_server_side_of_rfc_7677s_exchange() -> None:
    server = ScramServer(SHA256, lookup({"user": rfc_credential()}), server_nonce=RFC_SERVER_NONCE)
    assert server.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.username == "user"


def test_the_client_side_of_rfc_7677s_exchange() -> None:
    client = ScramClient(SHA256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == RFC_CLIENT_FIRST
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.check(RFC_SERVER_FINAL)
    with pytest.raises(ScramError, match="server final"):
        client.check(b"v=" + base64.b64encode(b"x" * 32))


@pytest.mark.parametrize("scram", [SHA256, SHA512])
def test_a_client_and_the_server_agree(scram) -> None:  # type: ignore[no-untyped-def]
    users = {"alice,=x": credential_from_password(scram, "s3cret", 4096)}
    server = ScramServer(scram, users.get)
    client = ScramClient(scram, "alice,=x", "s3cret")
    client.check(server.final(client.final(server.first(client.first()))))
    assert server.username == "alice,=x"


def test_a_wrong_password_is_refused() -> None:
    server = ScramServer(SHA256, {"user": rfc_credential()}.get)
    client = ScramClient(SHA256, "user", "not-pencil")
    server_first = server.first(client.first())
    with pytest.raises(ScramError, match=INVALID_CREDENTIALS):
        server.final(client.final(server_first))
    assert server.username is None


def test_an_unknown_user_is_refused_as_a_wrong_password_is() -> None:
    server = ScramServer(SHA256, {"user": rfc_credential()}.get)
    with pytest.raises(ScramError) as refused:
        server.first(b"n,,n=mallory,r=abc")
    assert str(refused.value) == INVALID_CREDENTIALS


def test_a_replayed_final_message_does_not_authenticate_another_exchange() -> None:
    """A recorded client-final of one exchange, sent in a new one (a fresh server nonce)."""
    users = {"user": rfc_credential()}
    server = ScramServer(SHA256, users.get, server_nonce=RFC_SERVER_NONCE)
    server.first(RFC_CLIENT_FIRST)
    server.final(RFC_CLIENT_FINAL)
    replay = ScramServer(SHA256, users.get)
    replay.first(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError, match="Invalid client nonce"):
        replay.final(RFC_CLIENT_FINAL)
    assert replay.username is None


def test_a_final_message_with_a_forged_nonce_or_binding_or_proof_is_refused() -> None:
    users = {"user": rfc_credential()}
    for bad, why in [
        (RFC_CLIENT_FINAL.replace(b"c=biws", b"c=eSws"), "channel binding"),
        (RFC_CLIENT_FINAL.replace(b"p=dHz", b"p=eHz"), "Invalid user credentials"),
        (RFC_CLIENT_FINAL.replace(b"p=", b"x="), "Invalid SCRAM client final"),
        (b"c=biws,r=rOprNGfwEbeRWgbNEkqOother,p=AAAA", "Invalid client nonce"),
    ]:
        server = ScramServer(SHA256, users.get, server_nonce=RFC_SERVER_NONCE)
        server.first(RFC_CLIENT_FIRST)
        with pytest.raises(ScramError, match=why):
            server.final(bad)


def test_messages_out_of_order_or_malformed_are_refused() -> None:
    users = {"user": rfc_credential()}
    with pytest.raises(ScramError, match="Unexpected SCRAM client-final"):
        ScramServer(SHA256, users.get).final(RFC_CLIENT_FINAL)
    with pytest.raises(ScramError, match="Invalid SCRAM client first"):
        ScramServer(SHA256, users.get).first(b"p=tls-unique,,n=user,r=abc")
    with pytest.raises(ScramError, match="not UTF-8"):
        ScramServer(SHA256, users.get).first(b"\xff")
    with pytest.raises(ScramError, match="different from username"):
        ScramServer(SHA256, users.get).first(b"n,a=admin,n=user,r=abc")
    server = ScramServer(SHA256, users.get)
    server.first(RFC_CLIENT_FIRST)
    with pytest.raises(ScramError, match="Unexpected SCRAM client-first"):
        server.first(RFC_CLIENT_FIRST)


def test_the_stored_credential_text_round_trips() -> None:
    credential = rfc_credential()
    text = encode_credential(credential)
    assert text.startswith("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=")
    assert text.endswith(",iterations=4096")
    assert decode_credential(text) == credential
    for bad, why in [
        ("salt=AA==,stored_key=AA==", "missing server_key, iterations"),
        ("salt=!!,stored_key=AA==,server_key=AA==,iterations=4096", "salt is not base64"),
        ("salt=AA==,stored_key=AA==,server_key=AA==,iterations=x", "iterations"),
        ("garbage", "expected key=value"),
    ]:
        with pytest.raises(ScramError, match=why):
            decode_credential(bad)


def test_iterations_are_bounded_and_a_fresh_salt_is_random() -> None:
    with pytest.raises(ScramError, match="Iterations 1000 is less than the minimum 4096"):
        credential_from_password(SHA256, "pw", 1000)
    with pytest.raises(ScramError, match="more than the maximum 16384"):
        credential_from_password(SHA512, "pw", 20000)
    a, b = (credential_from_password(SHA256, "pw", 4096) for _ in range(2))
    assert a.salt != b.salt and a.stored_key != b.stored_key
    assert password_matches(SHA256, a, "pw") and not password_matches(SHA256, a, "pW")
    with pytest.raises(ScramError, match="unknown SCRAM mechanism SCRAM-SHA-1"):
        mechanism("SCRAM-SHA-1")
