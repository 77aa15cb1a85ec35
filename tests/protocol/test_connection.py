"""kwire.protocol.connection: the sans-IO connection machine's rules, role by role, without sockets."""

from __future__ import annotations

import struct

from kwire.protocol import messages
from kwire.protocol.connection import (
    NEED_DATA,
    ClientConnection,
    ConnectionClosed,
    FrameError,
    ObserverConnection,
    RequestReceived,
    RequestUnanswered,
    ResponseReceived,
    SaslTokenReceived,
    ServerConnection,
    UnawaitedResponse,
    api_versions_retry,
    decode_api_versions_response,
    produce_acks,
)
from kwire.protocol.errors import UnsupportedVersionError
from kwire.protocol.frames import decode_request, encode_response, response_header_version

UNSUPPORTED = UnsupportedVersionError.code


def _events(machine) -> list:
    out = []
    while (event := machine.next_event()) is not NEED_DATA:
        out.append(event)
    return out


def _answer(server: ServerConnection, event: RequestReceived, response) -> bytes:
    return b"".join(server.send_response(response, event.api_version, event.correlation_id))


# -- client ---------------------------------------------------------------------------------------
def test_a_client_pairs_responses_with_its_requests_in_order():
    client, server = ClientConnection(client_id="me"), ServerConnection()
    sent = [client.send_request(messages.MetadataRequest(topics=[]), 12, context="first"),
            client.send_request(messages.MetadataRequest(topics=[]), 4, context="second")]
    assert client.in_flight == 2
    server.receive_data(b"".join(sent))
    requests = _events(server)
    assert [(e.api_key, e.api_version, e.correlation_id, e.header.client_id) for e in requests] == \
        [(3, 12, 1, "me"), (3, 4, 2, "me")]
    client.receive_data(b"".join(_answer(server, e, messages.MetadataResponse(brokers=[], topics=[]))
                                 for e in requests))
    responses = _events(client)
    assert [type(e) for e in responses] == [ResponseReceived, ResponseReceived]
    assert [(e.correlation_id, e.api_version, e.context) for e in responses] == [(1, 12, "first"), (2, 4, "second")]
    assert responses[0].decode() == messages.MetadataResponse(brokers=[], topics=[])
    assert client.in_flight == 0


def test_a_response_out_of_order_breaks_the_client_connection():
    client = ClientConnection()
    client.send_request(messages.MetadataRequest(topics=[]), 1)
    client.send_request(messages.MetadataRequest(topics=[]), 1)
    client.receive_data(encode_response(messages.MetadataResponse(), 1, 2))
    client.receive_data(encode_response(messages.MetadataResponse(), 1, 1))
    (error,) = _events(client)
    assert isinstance(error, FrameError) and error.from_client is False
    assert "answered correlation id 2, expected 1" in str(error.error)
    assert client.broken and client.next_event() is NEED_DATA


def test_acks_0_produce_waits_for_nothing_and_an_answer_to_it_is_dropped():
    client = ClientConnection()
    client.send_request(messages.ProduceRequest(acks=0, timeout_ms=1, topic_data=[]), 9)
    assert client.in_flight == 0 and client.awaiting_unawaited
    client.send_request(messages.ProduceRequest(acks=1, timeout_ms=1, topic_data=[]), 9)
    assert client.in_flight == 1
    client.receive_data(encode_response(messages.ProduceResponse(), 9, 1)
                        + encode_response(messages.ProduceResponse(), 9, 2))
    assert [type(e) for e in _events(client)] == [UnawaitedResponse, ResponseReceived]


def test_sasl_v0_switches_the_client_to_bare_tokens_until_its_next_request():
    client = ClientConnection()
    client.send_request(messages.SaslHandshakeRequest(mechanism="PLAIN"), 0)
    client.receive_data(encode_response(messages.SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"]), 0, 1))
    assert [type(e) for e in _events(client)] == [ResponseReceived]
    assert client.sasl_tokens
    assert client.send_sasl_token(b"\0u\0p") == struct.pack(">i", 4) + b"\0u\0p"
    client.receive_data(struct.pack(">i", 0))  # the broker's empty answer, no header
    assert _events(client) == [SaslTokenReceived(b"", False)]
    client.send_request(messages.MetadataRequest(topics=[]), 1)
    assert not client.sasl_tokens


def test_a_refused_sasl_handshake_v0_keeps_kafka_frames():
    client = ClientConnection()
    client.send_request(messages.SaslHandshakeRequest(mechanism="X"), 0)
    client.receive_data(encode_response(messages.SaslHandshakeResponse(error_code=33, mechanisms=["PLAIN"]), 0, 1))
    _events(client)
    assert not client.sasl_tokens


def test_api_versions_fallback_reads_an_old_brokers_v0_refusal():
    client = ClientConnection()
    client.send_request(messages.ApiVersionsRequest(), 3)
    ranges = [messages.ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=2)]
    # The broker lacks v3: it answers in v0's layout (and header v0, as every ApiVersions answer).
    client.receive_data(encode_response(messages.ApiVersionsResponse(error_code=UNSUPPORTED, api_keys=ranges), 0, 1))
    (event,) = _events(client)
    response = event.decode()
    assert response.error_code == UNSUPPORTED and response.api_keys[0].max_version == 2
    assert api_versions_retry(response, 3) == 2
    assert api_versions_retry(messages.ApiVersionsResponse(error_code=UNSUPPORTED, api_keys=[]), 3) == 0
    assert api_versions_retry(messages.ApiVersionsResponse(error_code=0, api_keys=[]), 3) is None


def test_api_versions_answers_carry_response_header_v0_even_when_flexible():
    assert response_header_version(18, 3) == 0 and response_header_version(3, 12) == 1
    ok = messages.ApiVersionsResponse(error_code=0, api_keys=[])
    assert decode_api_versions_response(encode_response(ok, 3, 7)[4:], 3) == ok


def test_end_of_stream_is_an_event_after_the_frames_before_it():
    client = ClientConnection()
    client.send_request(messages.MetadataRequest(topics=[]), 1)
    frame = encode_response(messages.MetadataResponse(), 1, 1)
    client.receive_data(frame + b"\0\0")
    client.receive_data(b"")
    assert [type(e) for e in _events(client)] == [ResponseReceived, ConnectionClosed]


# -- server ---------------------------------------------------------------------------------------
def test_a_server_reads_headers_of_every_version_and_unknown_apis():
    client, server = ClientConnection(client_id="c"), ServerConnection()
    server.receive_data(client.send_request(messages.MetadataRequest(topics=[]), 12)  # header v2
                        + client.send_request(messages.MetadataRequest(topics=[]), 8)  # header v1
                        + struct.pack(">ihhih", 10, 999, 0, 3, -1))  # api key 999
    flexible, old, unknown = _events(server)
    assert (flexible.correlation_id, flexible.header.client_id, flexible.known) == (1, "c", True)
    assert (old.correlation_id, old.header.client_id, old.known) == (2, "c", True)
    assert (unknown.api_key, unknown.correlation_id, unknown.known) == (999, 3, False)
    assert decode_request(flexible.frame)[1] == messages.MetadataRequest(topics=[])


def test_a_server_sees_acks_0_in_every_produce_layout():
    client = ClientConnection()
    for version in (3, 8, 9, 13):  # a string transactional id before acks, then a compact one
        for acks, tid in ((0, None), (0, "tx"), (1, "t" * 200), (-1, None)):
            frame = client.send_request(messages.ProduceRequest(transactional_id=tid, acks=acks, timeout_ms=5,
                                                                topic_data=[]), version)
            server = ServerConnection()
            server.receive_data(frame)
            (event,) = _events(server)
            assert produce_acks(event.frame, event.body_offset, version) == acks
            assert event.expects_response is (acks != 0)


def test_sasl_v0_switches_the_server_when_its_handshake_answer_is_sent():
    client, server = ClientConnection(), ServerConnection()
    handshake = client.send_request(messages.SaslHandshakeRequest(mechanism="PLAIN"), 0)
    token = struct.pack(">i", 4) + b"\0u\0p"
    server.receive_data(handshake + token)  # a client that did not wait: still a token
    (event,) = [server.next_event()]
    assert event.api_key == 17 and not server.sasl_tokens
    _answer(server, event, messages.SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"]))
    assert server.sasl_tokens
    assert _events(server) == [SaslTokenReceived(b"\0u\0p", True)]
    assert server.send_sasl_token(b"", last=True) == b"\0\0\0\0"
    server.receive_data(client.send_request(messages.MetadataRequest(topics=[]), 1))
    assert [type(e) for e in _events(server)] == [RequestReceived]


def test_an_unreadable_header_is_a_frame_error_and_the_end():
    server = ServerConnection()
    server.receive_data(struct.pack(">ihh", 4, 3, 1) + struct.pack(">i", 0))
    (error,) = _events(server)
    assert isinstance(error, FrameError) and error.from_client


def test_a_size_over_the_limit_is_a_frame_error():
    server = ServerConnection(max_frame_size=100)
    server.receive_data(struct.pack(">i", 101))
    (error,) = _events(server)
    assert isinstance(error, FrameError) and "over the maximum of 100" in str(error.error)


# -- observer -------------------------------------------------------------------------------------
def _observer_feed(observer: ObserverConnection, data: bytes, from_client: bool) -> list:
    observer.receive_data(data, from_client=from_client)
    return _events(observer)


def test_an_observer_pairs_and_reports_what_the_capture_lost():
    client = ClientConnection()
    observer = ObserverConnection()
    requests = b"".join(client.send_request(messages.MetadataRequest(topics=[]), 1) for _ in range(3))
    events = _observer_feed(observer, requests, True)
    assert [e.correlation_id for e in events] == [1, 2, 3]
    for e in events:
        e.outstanding.context = f"ex{e.correlation_id}"
    # The answer to 1 was lost: the answer to 2 leaves it unanswered.
    answered = _observer_feed(observer, encode_response(messages.MetadataResponse(), 1, 2), False)
    assert [type(e) for e in answered] == [RequestUnanswered, ResponseReceived]
    assert (answered[0].context, answered[0].why, answered[1].context) == ("ex1", "skipped", "ex2")
    orphan = _observer_feed(observer, encode_response(messages.MetadataResponse(), 1, 99), False)
    assert isinstance(orphan[0], FrameError) and orphan[0].from_client is False
    assert [(e.context, e.why) for e in observer.close("capture_end")] == [("ex3", "capture_end")]


def test_an_observer_follows_sasl_v0_tokens_and_acks_0():
    client = ClientConnection()
    observer = ObserverConnection()
    _observer_feed(observer, client.send_request(messages.SaslHandshakeRequest(mechanism="PLAIN"), 0), True)
    _observer_feed(observer, encode_response(messages.SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"]),
                                             0, 1), False)
    (token,) = _observer_feed(observer, struct.pack(">i", 4) + b"\0u\0p", True)
    assert token == SaslTokenReceived(b"\0u\0p", True)
    token.context = "login"
    assert _observer_feed(observer, b"\0\0\0\0", False) == [SaslTokenReceived(b"", False, "login")]
    (produce,) = _observer_feed(observer, client.send_request(
        messages.ProduceRequest(acks=0, timeout_ms=1, topic_data=[]), 9), True)
    assert not observer.sasl_tokens  # a real request ended the tokens
    assert produce.outstanding is None and not observer.in_flight
