"""PLAIN tokens, and the TLS contexts over a real socket pair with certificates from kwire.security.testing."""

from __future__ import annotations

import datetime
import socket
import ssl
import threading

import pytest

from kwire.security import AuthenticationError, client_context, parse_plain_token, plain_token, server_context
from kwire.security.testing import make_ca, make_cert


def test_plain_round_trip():
    assert parse_plain_token(plain_token("alice", "pw")) == ("", "alice", "pw")
    assert parse_plain_token(plain_token("alice", "pw", "alice")) == ("alice", "alice", "pw")


@pytest.mark.parametrize("token", [b"", b"alice", b"\x00alice", b"\x00\x00pw", b"\x00alice\x00",
                                   b"a\x00b\x00c\x00d", b"\x00\xff\x00pw", b"\x00" + b"a" * 2000 + b"\x00pw"])
def test_plain_malformed(token):
    with pytest.raises(AuthenticationError) as err:
        parse_plain_token(token)
    assert "malformed PLAIN" in str(err.value)


def _handshake(server_ctx, client_ctx, server_hostname="localhost"):
    """TLS over a socketpair; returns (server error, client error)."""
    a, b = socket.socketpair()
    errors = {}

    def serve():
        try:
            with server_ctx.wrap_socket(a, server_side=True) as s:
                s.sendall(b"ok")
        except (ssl.SSLError, OSError) as exc:
            errors["server"] = exc

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_ctx.wrap_socket(b, server_hostname=server_hostname) as c:
            assert c.recv(2) == b"ok"
    except (ssl.SSLError, OSError) as exc:
        errors["client"] = exc
    finally:
        thread.join(10)
    return errors.get("server"), errors.get("client")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("pki"))
    ca = make_ca(d)
    now = datetime.datetime.now(datetime.timezone.utc)
    return {
        "dir": d, "ca": ca, "server": make_cert(ca, d, "localhost"),
        "expired": make_cert(ca, d, "localhost", not_before=now - datetime.timedelta(days=10),
                             not_after=now - datetime.timedelta(days=1)),
        "client": make_cert(ca, d, "alice", sans=(), client=True),
        "other_ca": make_ca(d + "/other"),
    }


def test_tls_handshake_and_mutual_tls(pki):
    server = server_context(certificate_location=pki["server"].cert, key_location=pki["server"].key)
    assert _handshake(server, client_context(ca_location=pki["ca"].cert)) == (None, None)
    mutual = server_context(certificate_location=pki["server"].cert, key_location=pki["server"].key,
                            ca_location=pki["ca"].cert, client_auth="required")
    with_cert = client_context(ca_location=pki["ca"].cert, certificate_location=pki["client"].cert,
                               key_location=pki["client"].key)
    assert _handshake(mutual, with_cert) == (None, None)
    server_err, _ = _handshake(mutual, client_context(ca_location=pki["ca"].cert))
    assert server_err is not None


def test_tls_refusals(pki):
    server = server_context(certificate_location=pki["server"].cert, key_location=pki["server"].key)
    _, err = _handshake(server, client_context(ca_location=pki["other_ca"].cert))
    assert isinstance(err, ssl.SSLCertVerificationError)
    expired = server_context(certificate_location=pki["expired"].cert, key_location=pki["expired"].key)
    _, err = _handshake(expired, client_context(ca_location=pki["ca"].cert))
    assert isinstance(err, ssl.SSLCertVerificationError) and "expired" in str(err)
    _, err = _handshake(server, client_context(ca_location=pki["ca"].cert), server_hostname="elsewhere.example")
    assert isinstance(err, ssl.SSLCertVerificationError) and "mismatch" in str(err).lower()
    assert _handshake(server, client_context(ca_location=pki["ca"].cert, check_hostname=False),
                      server_hostname="elsewhere.example") == (None, None)


def test_encrypted_key_and_option_checks(pki):
    cert = make_cert(pki["ca"], pki["dir"], "localhost", key_password="kp")
    server = server_context(certificate_location=cert.cert, key_location=cert.key, key_password="kp")
    assert _handshake(server, client_context(ca_location=pki["ca"].cert)) == (None, None)
    with pytest.raises(ValueError):
        server_context(certificate_location=cert.cert, key_location=cert.key, client_auth="required")
    with pytest.raises(ValueError):
        server_context(certificate_location=cert.cert, key_location=cert.key, client_auth="maybe")
    with pytest.raises(ssl.SSLError):  # no terminal prompt for the pass phrase: an error
        server_context(certificate_location=cert.cert, key_location=cert.key)
