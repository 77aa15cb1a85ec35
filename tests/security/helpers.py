"""Shared by the security tests: a throwaway PKI, a raw Kafka connection (plain or TLS) that speaks
the SASL steps by hand, and a secured EmbeddedBroker."""

from __future__ import annotations

import datetime
import socket
import ssl
import struct
from dataclasses import dataclass

from kwire.broker import EmbeddedBroker
from kwire.protocol import encode_request, messages
from kwire.protocol.frames import decode_response
from kwire.security import ScramClient, client_context, plain_token
from kwire.security.testing import CertPaths, make_ca, make_cert

PASSWORD = "correct horse battery staple"  # what the tests grep the data dir for


@dataclass(frozen=True)
class Pki:
    dir: str
    ca: CertPaths
    server: CertPaths
    expired: CertPaths
    client: CertPaths
    other_ca: CertPaths


def make_pki(directory) -> Pki:
    d = str(directory)
    ca = make_ca(d)
    now = datetime.datetime.now(datetime.timezone.utc)
    return Pki(d, ca, make_cert(ca, d, "localhost"),
               make_cert(ca, d, "localhost", not_before=now - datetime.timedelta(days=10),
                         not_after=now - datetime.timedelta(days=1)),
               make_cert(ca, d, "alice", sans=(), client=True), make_ca(d + "/other", cn="some other CA"))


def secure_broker(data_dir, pki: Pki, listeners=("SASL_SSL://127.0.0.1:0", "PLAINTEXT://127.0.0.1:0"),
                  cert: CertPaths | None = None, **settings) -> EmbeddedBroker:
    cert = cert or pki.server
    return EmbeddedBroker(data_dir, listeners=list(listeners), ssl_certificate_location=cert.cert,
                          ssl_key_location=cert.key, **settings)


class RawConnection:
    """One socket to the broker, requests encoded by kwire's codec, SASL driven step by step."""

    def __init__(self, address: str, *, tls: ssl.SSLContext | None = None, timeout: float = 10):
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock = tls.wrap_socket(sock, server_hostname=host) if tls else sock
        self.correlation = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed by the broker")
            buf += chunk
        return buf

    def read_frame(self) -> bytes:
        return self._exact(struct.unpack(">i", self._exact(4))[0])

    def call(self, request, version: int):
        self.correlation += 1
        self.sock.sendall(encode_request(request, version, self.correlation, client_id="raw-test"))
        header, response = decode_response(self.read_frame(), request.API_KEY, version)
        assert header.correlation_id == self.correlation
        return response

    def token(self, data: bytes) -> bytes:
        """v0 framing: a bare size-prefixed token, answered the same way."""
        self.sock.sendall(struct.pack(">i", len(data)) + data)
        return self.read_frame()

    def closed_by_peer(self, timeout: float = 10) -> bool:
        self.sock.settimeout(timeout)
        try:
            while True:
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError, ssl.SSLError):
            return True
        except TimeoutError:
            return False

    # -- SASL --------------------------------------------------------------------------------------
    def handshake(self, mechanism: str, version: int = 1):
        return self.call(messages.SaslHandshakeRequest(mechanism=mechanism), version)

    def authenticate(self, data: bytes, version: int = 2):
        return self.call(messages.SaslAuthenticateRequest(auth_bytes=data), version)

    def login(self, mechanism: str, username: str, password: str, *, framing: int = 1) -> None:
        """A whole login (raises AssertionError when the broker refuses)."""
        resp = self.handshake(mechanism, 0 if framing == 0 else 1)
        assert resp.error_code == 0, resp
        step = self.token if framing == 0 else (lambda b: _checked(self.authenticate(b)))
        if mechanism == "PLAIN":
            assert step(plain_token(username, password)) == b""
            return
        client = ScramClient(mechanism, username, password)
        server_first = step(client.first_message())
        client.verify_server_final(step(client.final_message(server_first)))


def _checked(resp) -> bytes:
    assert resp.error_code == 0, (resp.error_code, resp.error_message)
    return bytes(resp.auth_bytes)


def tls_context(pki: Pki, **kw) -> ssl.SSLContext:
    return client_context(ca_location=pki.ca.cert, **kw)
