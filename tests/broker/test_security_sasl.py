"""SASL on kwire's broker, driven by hand over real sockets: both framings, the pre-authentication
gate, failed logins (logged, delayed per connection without stalling the broker), and fuzzed exchanges
that must neither crash the broker nor log anyone in."""

from __future__ import annotations

import logging
import random
import struct
import threading
import time

import pytest

from kwire.broker import EmbeddedBroker
from kwire.protocol import messages
from kwire.protocol.errors import (
    IllegalSaslStateError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from kwire.security import ScramClient, plain_token
from tests.security.helpers import PASSWORD, RawConnection
from tests.tiers import examples

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


def _broker(tmp_path, **settings) -> EmbeddedBroker:
    b = EmbeddedBroker(tmp_path / "data", listeners=["SASL_PLAINTEXT://127.0.0.1:0", "PLAINTEXT://127.0.0.1:0"],
                       **settings)
    b.add_user("alice", PASSWORD)
    return b


@pytest.fixture
def broker(tmp_path):
    with _broker(tmp_path, failed_authentication_delay_ms=0) as b:
        yield b


def _metadata(conn: RawConnection):
    return conn.call(messages.MetadataRequest(topics=None), 12)


@pytest.mark.parametrize("framing", [0, 1], ids=["v0-raw-tokens", "v1-sasl-authenticate"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_login_then_served(broker, caplog, mechanism, framing):
    caplog.set_level(logging.INFO, "kwire.broker.auth")
    with RawConnection(broker.bootstrap_for("SASL_PLAINTEXT")) as conn:
        versions = conn.call(messages.ApiVersionsRequest(), 3)  # allowed before the login
        assert {17, 36} <= {k.api_key for k in versions.api_keys}
        conn.login(mechanism, "alice", PASSWORD, framing=framing)
        meta = _metadata(conn)
        assert meta.brokers[0].port == int(broker.bootstrap_for("SASL_PLAINTEXT").rsplit(":", 1)[1])
        # no re-authentication: a second handshake is refused, the connection stays usable
        assert conn.handshake(mechanism).error_code == IllegalSaslStateError.code
        assert _metadata(conn).brokers
    framing_text = "v0 raw tokens" if framing == 0 else "SaslAuthenticate"
    assert "User:alice logged in from 127.0.0.1" in caplog.text and f"with {mechanism} ({framing_text})" in caplog.text


def test_anything_but_sasl_before_login_closes(broker, caplog):
    caplog.set_level(logging.WARNING, "kwire.broker.network")
    address = broker.bootstrap_for("SASL_PLAINTEXT")
    with RawConnection(address) as conn:
        with pytest.raises(ConnectionError):
            _metadata(conn)
    assert "Metadata before SASL authentication (listener SASL_PLAINTEXT)" in caplog.text
    with RawConnection(address) as conn:  # after the handshake, still nothing else
        assert conn.handshake("SCRAM-SHA-256").error_code == 0
        with pytest.raises(ConnectionError):
            conn.call(messages.ProduceRequest(acks=1, timeout_ms=1000, topic_data=[]), 9)
    assert "Produce before SASL authentication" in caplog.text
    with RawConnection(address) as conn:  # a frame over the pre-login limit is not even buffered
        conn.sock.sendall(struct.pack(">i", 4 << 20) + b"\0" * 64)
        assert conn.closed_by_peer()
    assert "over the maximum of 524288" in caplog.text


def test_out_of_order_and_unknown_mechanism(broker):
    address = broker.bootstrap_for("SASL_PLAINTEXT")
    with RawConnection(address) as conn:
        resp = conn.authenticate(b"n,,n=alice,r=abc")
        assert resp.error_code == IllegalSaslStateError.code
        assert conn.closed_by_peer()  # (after a short linger that lets clients read the answer)
    with RawConnection(address) as conn:
        resp = conn.handshake("GSSAPI")
        assert resp.error_code == UnsupportedSaslMechanismError.code
        assert sorted(resp.mechanisms) == MECHANISMS
        assert conn.closed_by_peer()
    with RawConnection(broker.bootstrap_for("PLAINTEXT")) as conn:  # no SASL there: refused, still served
        assert conn.handshake("PLAIN").error_code == IllegalSaslStateError.code
        assert conn.authenticate(b"x").error_code == IllegalSaslStateError.code
        assert _metadata(conn).brokers


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("who", ["wrong-password", "unknown-user"])
def test_failed_login_is_answered_then_closed(broker, caplog, mechanism, who):
    caplog.set_level(logging.WARNING, "kwire.broker")
    user, password = ("alice", "not it") if who == "wrong-password" else ("nobody", PASSWORD)
    with RawConnection(broker.bootstrap_for("SASL_PLAINTEXT")) as conn:
        assert conn.handshake(mechanism).error_code == 0
        if mechanism == "PLAIN":
            resp = conn.authenticate(plain_token(user, password))
        else:
            client = ScramClient(mechanism, user, password)
            first = conn.authenticate(client.first_message())
            assert first.error_code == 0  # unknown users get a (fake) challenge too
            resp = conn.authenticate(client.final_message(bytes(first.auth_bytes)))
        assert resp.error_code == SaslAuthenticationFailedError.code
        assert resp.error_message.startswith("Authentication failed")
        assert PASSWORD not in resp.error_message and "not it" not in resp.error_message
        with pytest.raises(ConnectionError):  # nothing is served after that: the connection closes
            _metadata(conn)
    assert "failed login from 127.0.0.1" in caplog.text and f"user '{user}'" in caplog.text
    assert PASSWORD not in caplog.text and "not it" not in caplog.text


def test_failure_delay_grows_per_host_and_blocks_nobody_else(tmp_path, caplog):
    caplog.set_level(logging.WARNING, "kwire.broker.auth")
    with _broker(tmp_path, failed_authentication_delay_ms=200, failed_authentication_max_delay_ms=800) as b:
        address = b.bootstrap_for("SASL_PLAINTEXT")
        for expected_ms in (200, 400, 800, 800):
            with RawConnection(address) as conn:
                conn.handshake("PLAIN")
                t0 = time.monotonic()
                resp = conn.authenticate(plain_token("alice", "guess"))
                # a lower bound only: the answer is never sent before the delay
                assert time.monotonic() - t0 >= expected_ms / 1000 * 0.95
                assert resp.error_code == SaslAuthenticationFailedError.code
            assert f"(answered after {expected_ms} ms)" in caplog.text
        # While one connection waits out its delay, others log in and are served: the delay is that
        # connection's, not the broker's.
        slow = RawConnection(address)
        slow.handshake("PLAIN")
        answered = threading.Event()

        def fail_slowly():
            slow.authenticate(plain_token("alice", "guess again"))
            answered.set()

        thread = threading.Thread(target=fail_slowly)
        thread.start()
        with RawConnection(address) as conn:
            conn.login("SCRAM-SHA-512", "alice", PASSWORD)
            assert _metadata(conn).brokers
        assert not answered.is_set()  # the failed one is still waiting (0.8 s) while this was served
        thread.join(10)
        assert answered.is_set()
        slow.close()


# -- fuzzing -------------------------------------------------------------------------------------------------
_SPECIAL = [b",", b"=", b"\0", b"\xff", b"n=", b"r=", b"p=", b"c=", b"=2C", b"=3D", b"a=", b"m=", b"e=", b"\n"]


def _mutate(rng: random.Random, data: bytes) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        action = rng.randrange(6)
        pos = rng.randrange(len(data) + 1)
        if action == 0 and data:
            data[min(pos, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif action == 1:
            data[pos:pos] = rng.choice(_SPECIAL)
        elif action == 2:
            del data[pos:pos + rng.randint(1, 8)]
        elif action == 3:
            data[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif action == 4:
            data = data[:pos]
        else:
            data += data[: rng.randint(0, 64)]
    return bytes(data)


def _fuzz_tokens(rng: random.Random, mechanism: str) -> list[bytes]:
    """One exchange's client tokens: random bytes, or real messages (of a wrong password) mutated."""
    kind = rng.randrange(4)
    if kind == 0:
        return [rng.randbytes(rng.randint(0, 300)) for _ in range(rng.randint(1, 2))]
    if mechanism == "PLAIN":
        user = rng.choice(["alice", "bob", ""])
        token = plain_token(user, "wrong " + PASSWORD) if user else b"\0\0wrong " + PASSWORD.encode()
        return [_mutate(rng, token)]
    client = ScramClient(mechanism, rng.choice(["alice", "al=ice", "bob"]), "wrong " + PASSWORD)
    first = client.first_message()
    if kind == 1:
        return [_mutate(rng, first)]
    return [first if kind == 2 else _mutate(rng, first), None]  # None: a final built on the answer, mutated


def _run_case(address: str, rng: random.Random) -> None:
    mechanism = rng.choice(MECHANISMS)
    framing = rng.choice([0, 1])
    with RawConnection(address, timeout=10) as conn:
        if conn.handshake(mechanism, framing).error_code:
            raise AssertionError("handshake refused")
        answer = b""
        for token in _fuzz_tokens(rng, mechanism):
            if token is None:  # SCRAM: a client-final to the server-first we got, computed and mutated
                try:
                    client = ScramClient(mechanism, "alice", "wrong " + PASSWORD, nonce=answer.split(b",")[0][2:]
                                         .decode("ascii", "replace")[:24] or "x")
                    token = _mutate(rng, client.final_message(answer))
                except Exception:  # noqa: BLE001 - the fuzzed first message got a challenge we can't use
                    token = _mutate(rng, b"c=biws,r=" + answer[2:40] + b",p=AAAA")
            try:
                if framing == 0:
                    answer = conn.token(token)
                else:
                    resp = conn.authenticate(token)
                    if resp.error_code:
                        break
                    answer = bytes(resp.auth_bytes)
            except (ConnectionError, OSError):
                break
        # Whatever happened, nobody is logged in: a Metadata request is never answered.
        try:
            conn.sock.sendall(conn_request_metadata())
        except OSError:
            return
        conn.sock.settimeout(10)
        try:
            data = conn.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return
        assert data == b"", f"{mechanism} v{framing}: the broker answered after a fuzzed login: {data[:40]!r}"


def conn_request_metadata() -> bytes:
    from kwire.protocol import encode_request

    return encode_request(messages.MetadataRequest(topics=None), 12, 99, client_id="fuzz")


def _read_to_end(conn: RawConnection) -> bytes:
    conn.sock.settimeout(10)
    data = b""
    try:
        while chunk := conn.sock.recv(65536):
            data += chunk
    except (ConnectionResetError, BrokenPipeError):
        pass
    return data


def _correlation_ids(data: bytes) -> list[int]:
    ids = []
    while len(data) >= 8:
        size = struct.unpack_from(">i", data)[0]
        ids.append(struct.unpack_from(">i", data, 4)[0])
        data = data[4 + size:]
    return ids


def test_fuzzed_sasl_exchanges(broker, caplog):
    caplog.set_level(logging.ERROR, "kwire")
    rng = random.Random(20240607)
    address = broker.bootstrap_for("SASL_PLAINTEXT")
    # 1500 exchanges and 500 raw frames in make test, a quarter in make test-fast (tests/tiers.py).
    for _ in range(examples(1500)):
        _run_case(address, rng)
    # Raw frames before any handshake (random api keys, versions and bodies), each followed by a Metadata
    # request: whatever the frame, the connection ends closed and the Metadata request unanswered.
    for _ in range(examples(500)):
        with RawConnection(address) as conn:
            key = rng.choice([3, 0, 1, 17, 36, 18, rng.randrange(-5, 100)])
            body = struct.pack(">hhi", key, rng.randrange(-1, 20), rng.randrange(1000, 2**31)) + \
                rng.randbytes(rng.randint(0, 200))
            conn.sock.sendall(struct.pack(">i", len(body)) + body + conn_request_metadata())
            assert 99 not in _correlation_ids(_read_to_end(conn))
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text[-2000:]
    assert broker.state.security.credentials.users() == {"alice": ["SCRAM-SHA-256", "SCRAM-SHA-512"]}
    with RawConnection(address) as conn:  # and the broker still serves a real login
        conn.login("SCRAM-SHA-512", "alice", PASSWORD)
        assert _metadata(conn).brokers


def test_connection_without_login_is_closed_in_time(broker, caplog, monkeypatch):
    from kwire.broker import network

    monkeypatch.setattr(network, "LOGIN_TIMEOUT_S", 0.3)
    caplog.set_level(logging.WARNING, "kwire.broker.network")
    with RawConnection(broker.bootstrap_for("SASL_PLAINTEXT")) as idle:
        assert idle.handshake("PLAIN").error_code == 0  # ... and then nothing
        assert idle.closed_by_peer()
    assert "no SASL login within 0.3 s" in caplog.text
    with RawConnection(broker.bootstrap_for("SASL_PLAINTEXT")) as conn:  # a login in time is not affected
        conn.login("PLAIN", "alice", PASSWORD)
        time.sleep(0.5)
        assert _metadata(conn).brokers
