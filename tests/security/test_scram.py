"""SCRAM against the RFCs' own test vectors, both ends through the same code, and its failure modes."""

from __future__ import annotations

import base64

import pytest

from kwire.security import AuthenticationError, ScramClient, ScramServer, make_credential, verify_password
from kwire.security.scram import MECHANISMS


def _exchange(mechanism, salt_b64, client_nonce, server_nonce, client_first, server_first, client_final,
              server_final):
    """Run client and server against each other and check every message against the RFC's."""
    credential = make_credential(mechanism, "pencil", salt=base64.b64decode(salt_b64), iterations=4096)
    client = ScramClient(mechanism, "user", "pencil", nonce=client_nonce)
    server = ScramServer(mechanism, {"user": credential}.get, nonce=server_nonce)
    assert client.first_message() == client_first
    assert server.process(client_first) == server_first
    assert client.final_message(server_first) == client_final
    assert server.process(client_final) == server_final
    client.verify_server_final(server_final)
    assert server.done and client.done and server.username == "user"


def test_rfc7677_scram_sha_256_vector():
    _exchange(
        "SCRAM-SHA-256", "W22ZaJ0SNY7soEsUEjb6gQ==", "rOprNGfwEbeRWgbNEkqO", "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096",
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=",
        b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=",
    )


def test_rfc5802_scram_sha_1_vector():
    # SCRAM-SHA-1 is not a Kafka mechanism; it is here only so the RFC's vector exercises the same code.
    assert "SCRAM-SHA-1" not in MECHANISMS
    _exchange(
        "SCRAM-SHA-1", "QSXCR+Q6sek8bf92", "fyko+d2lbbFgONRv9qkxdawL", "3rfcNHYJY1ZVvWVs7j",
        b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL",
        b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096",
        b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
        b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=",
    )


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
def test_round_trip_with_random_nonces_and_escaped_username(mechanism):
    username = "al,ice=x"
    credential = make_credential(mechanism, "s3cret-pässword")
    client = ScramClient(mechanism, username, "s3cret-pässword")
    server = ScramServer(mechanism, {username: credential}.get)
    first = client.first_message()
    assert b"n=al=2Cice=3Dx," in first
    client.verify_server_final(server.process(client.final_message(server.process(first))))
    assert server.username == username
    assert verify_password(credential, "s3cret-pässword")
    assert not verify_password(credential, "s3cret-password")


def _run_failing(server, client):
    server_first = server.process(client.first_message())
    with pytest.raises(AuthenticationError) as err:
        server.process(client.final_message(server_first))
    assert server.username is None and not server.done
    return server_first, str(err.value)


def test_wrong_password_and_unknown_user_fail_alike():
    credential = make_credential("SCRAM-SHA-512", "right")
    lookup = {"alice": credential}.get
    _, wrong = _run_failing(ScramServer("SCRAM-SHA-512", lookup), ScramClient("SCRAM-SHA-512", "alice", "wrong"))
    first_a, unknown = _run_failing(ScramServer("SCRAM-SHA-512", lookup),
                                    ScramClient("SCRAM-SHA-512", "mallory", "x"))
    first_b, _ = _run_failing(ScramServer("SCRAM-SHA-512", lookup), ScramClient("SCRAM-SHA-512", "mallory", "x"))
    assert wrong == unknown
    assert "right" not in wrong and "wrong" not in wrong
    # the fake salt of an unknown user is stable, like a real one
    assert first_a.split(b",")[1] == first_b.split(b",")[1]


def test_credential_of_another_mechanism_does_not_verify():
    credential = make_credential("SCRAM-SHA-256", "pw")
    server = ScramServer("SCRAM-SHA-512", {"u": credential}.get)
    _run_failing(server, ScramClient("SCRAM-SHA-512", "u", "pw"))


def test_server_stays_failed_and_finished():
    credential = make_credential("SCRAM-SHA-256", "pw")
    server = ScramServer("SCRAM-SHA-256", {"u": credential}.get)
    with pytest.raises(AuthenticationError):
        server.process(b"garbage")
    with pytest.raises(AuthenticationError):
        server.process(b"n,,n=u,r=abc")
    ok = ScramServer("SCRAM-SHA-256", {"u": credential}.get)
    client = ScramClient("SCRAM-SHA-256", "u", "pw")
    ok.process(client.final_message(ok.process(client.first_message())))
    with pytest.raises(AuthenticationError):
        ok.process(b"c=biws")


@pytest.mark.parametrize("message", [
    b"", b"n,,", b"p=tls-unique,,n=u,r=abc", b"x,,n=u,r=abc", b"n,,m=ext,n=u,r=abc", b"n,,n=u",
    b"n,,n=u=41,r=abc", b"n,,n=,r=abc", b"n,a=other,n=u,r=abc", b"n,,n=u,r=ab,c", b"n,,n=u,r=abc,tokenauth=true",
    b"\xff\xfe", b"n,,n=u,r=" + b"a" * 5000,
])
def test_malformed_client_first_is_refused(message):
    server = ScramServer("SCRAM-SHA-256", {"u": make_credential("SCRAM-SHA-256", "pw")}.get)
    with pytest.raises(AuthenticationError):
        server.process(message)


def test_tampered_client_final_is_refused():
    credential = make_credential("SCRAM-SHA-256", "pw")
    for mutate in (lambda m: m.replace(b"c=biws", b"c=eSws"),  # channel-binding flag changed after the fact
                   lambda m: m.replace(b",r=", b",r=x"),
                   lambda m: m[:-4] + b"AAA=",
                   lambda m: m.split(b",p=")[0],
                   lambda m: m + b"=="):
        server = ScramServer("SCRAM-SHA-256", {"u": credential}.get)
        client = ScramClient("SCRAM-SHA-256", "u", "pw")
        final = client.final_message(server.process(client.first_message()))
        with pytest.raises(AuthenticationError):
            server.process(mutate(final))


def test_client_checks_the_server():
    client = ScramClient("SCRAM-SHA-256", "u", "pw", nonce="abc")
    with pytest.raises(AuthenticationError, match="nonce"):
        client.final_message(b"r=zzz,s=QSXCR+Q6sek8bf92,i=4096")
    with pytest.raises(AuthenticationError, match="iteration"):
        client.final_message(b"r=abcdef,s=QSXCR+Q6sek8bf92,i=1")
    with pytest.raises(AuthenticationError, match="refused"):
        client.final_message(b"e=unknown-user")
    # a server that does not hold the credential cannot produce the right signature
    real = ScramServer("SCRAM-SHA-256", {"u": make_credential("SCRAM-SHA-256", "other")}.get)
    client = ScramClient("SCRAM-SHA-256", "u", "pw")
    client.final_message(real.process(client.first_message()))
    with pytest.raises(AuthenticationError, match="signature"):
        client.verify_server_final(b"v=" + base64.b64encode(b"\0" * 32))


def test_make_credential_bounds():
    with pytest.raises(ValueError):
        make_credential("SCRAM-SHA-256", "pw", iterations=1000)
    with pytest.raises(ValueError):
        make_credential("SCRAM-MD5", "pw")
    with pytest.raises(ValueError):
        make_credential("SCRAM-SHA-256", "")


def test_old_librdkafka_repeated_client_nonce_is_accepted():
    # librdkafka < 1.x sent r=<client nonce><client nonce + server nonce> in its client-final message (and
    # signed that); Kafka accepts it, so does kwire. Built here by hand, per RFC 5802.
    import hashlib
    import hmac

    credential = make_credential("SCRAM-SHA-512", "pw")
    server = ScramServer("SCRAM-SHA-512", {"u": credential}.get, nonce="SERVER")
    first_bare = "n=u,r=CLIENT"
    server_first = server.process(b"n,," + first_bare.encode()).decode()
    assert server_first.startswith("r=CLIENTSERVER,")
    salt, iterations = base64.b64decode(server_first.split(",")[1][2:]), int(server_first.split(",")[2][2:])
    salted = hashlib.pbkdf2_hmac("sha512", b"pw", salt, iterations)
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    without_proof = "c=biws,r=CLIENTCLIENTSERVER"
    auth = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.sha512(client_key).digest(), auth, "sha512").digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    server.process(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
    assert server.username == "u"
    other = ScramServer("SCRAM-SHA-512", {"u": credential}.get, nonce="SERVER")
    other.process(b"n,,n=u,r=CLIENT")
    with pytest.raises(AuthenticationError, match="nonce"):  # anything else still is a mismatch
        other.process(b"c=biws,r=XCLIENTSERVER,p=" + base64.b64encode(proof))
