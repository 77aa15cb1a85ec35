"""kwire.protocol.connection, property-based: any split of the same bytes into chunks gives the same
events, for the client, the server and the observer, through SASL v0 tokens, acks=0 produces, the
ApiVersions fallback and pipelined requests."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kwire.protocol import messages
from kwire.protocol.connection import (
    NEED_DATA,
    ClientConnection,
    ObserverConnection,
    RequestReceived,
    ResponseReceived,
    SaslTokenReceived,
    ServerConnection,
    UnawaitedResponse,
)
from kwire.protocol.errors import UnsupportedVersionError
from kwire.protocol.frames import decode_request
from tests.tiers import examples

# What a client does in one round: requests pipelined, or one step of a SASL v0 login.
STEPS = ("api_versions", "api_versions_refused", "metadata_old", "metadata_flexible", "produce_acks0",
         "produce_acks1", "fetch")
_REFUSE = "refuse-me"
_RANGES = [messages.ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=2)]


def _request(step: str):
    if step == "api_versions":
        return messages.ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3
    if step == "api_versions_refused":
        return messages.ApiVersionsRequest(client_software_name=_REFUSE, client_software_version="1"), 3
    if step == "metadata_old":
        return messages.MetadataRequest(topics=[]), 4
    if step == "metadata_flexible":
        return messages.MetadataRequest(topics=[]), 12
    if step == "fetch":
        return messages.FetchRequest(max_wait_ms=1, topics=[]), 11
    return messages.ProduceRequest(acks=0 if step == "produce_acks0" else 1, timeout_ms=5, topic_data=[]), 9


def _respond(server: ServerConnection, event, tokens_left: list[int]) -> bytes:
    """The test server's answer to one event (b"" for none)."""
    if isinstance(event, SaslTokenReceived):
        tokens_left[0] -= 1
        return server.send_sasl_token(b"server-" + bytes(event.token[:4]), last=tokens_left[0] == 0)
    assert isinstance(event, RequestReceived), event
    if not event.expects_response:
        return b""
    key, version, cid = event.api_key, event.api_version, event.correlation_id
    if key == 18:
        request = decode_request(event.frame)[1]
        if request.client_software_name == _REFUSE:  # as an old broker: v0 layout, its ranges
            return b"".join(server.send_response(messages.ApiVersionsResponse(
                error_code=UnsupportedVersionError.code, api_keys=_RANGES), 0, cid))
        response = messages.ApiVersionsResponse(error_code=0, api_keys=_RANGES)
    elif key == 17:
        mechanism = decode_request(event.frame)[1].mechanism
        tokens_left[0] = 1 if mechanism == "PLAIN" else 2
        response = messages.SaslHandshakeResponse(error_code=0, mechanisms=[mechanism])
    elif key == 3:
        response = messages.MetadataResponse(brokers=[], topics=[])
    elif key == 1:
        response = messages.FetchResponse(responses=[])
    else:
        response = messages.ProduceResponse(responses=[])
    return b"".join(server.send_response(response, version, cid))


def _serve(server: ServerConnection, events: list, tokens_left: list[int]) -> list[bytes]:
    """Take the server's events one at a time, answering each before the next is read."""
    answers = []
    while (event := server.next_event()) is not NEED_DATA:
        events.append(event)
        answers.append(_respond(server, event, tokens_left))
    return answers


def _drain(machine) -> list:
    out = []
    while (event := machine.next_event()) is not NEED_DATA:
        out.append(event)
    return out


@st.composite
def scenarios(draw):
    """Rounds of the client: a list of (kind, steps); kind "requests" (pipelined) or "sasl"
    (a SaslHandshake v0 and the mechanism's tokens, one round each)."""
    rounds = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.integers(0, 4)) == 0:
            rounds.append(("sasl", draw(st.sampled_from(["PLAIN", "SCRAM-SHA-256"]))))
        else:
            rounds.append(("requests", draw(st.lists(st.sampled_from(STEPS), min_size=1, max_size=4))))
    return rounds


def _client_actions(rounds) -> list[list]:
    """Per round of the wire: what the client sends ("request", message, version) / ("token", bytes)."""
    out = []
    for kind, what in rounds:
        if kind == "requests":
            out.append([("request", *_request(step)) for step in what])
        else:
            out.append([("request", messages.SaslHandshakeRequest(mechanism=what), 0)])
            for i in range(1 if what == "PLAIN" else 2):
                out.append([("token", b"client-%d" % i)])
    return out


def _play(actions):
    """Runs the scenario with whole frames: per round (client bytes, server bytes), and the
    reference events of each role."""
    client, server, observer = ClientConnection(client_id="p"), ServerConnection(), ObserverConnection()
    wire, client_events, server_events, observer_events = [], [], [], []
    tokens_left = [0]
    for round_actions in actions:
        sent = b"".join(_send(client, action) for action in round_actions)
        server.receive_data(sent)
        answered = b"".join(_serve(server, server_events, tokens_left))
        if answered:  # (b"" would be the end of the stream)
            client.receive_data(answered)
        client_events += _drain(client)
        observer.receive_data(sent, from_client=True)
        if answered:
            observer.receive_data(answered, from_client=False)
        observer_events += _drain(observer)
        wire.append((sent, answered))
    return wire, client_events, server_events, observer_events


def _send(client: ClientConnection, action) -> bytes:
    if action[0] == "token":
        return client.send_sasl_token(action[1])
    return client.send_request(action[1], action[2])


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts}) if data else []
    pieces, start = [], 0
    for p in points + [len(data)]:
        pieces.append(data[start:p])
        start = p
    return [p for p in pieces if p]


def _feed_buffers(machine, chunk: bytes) -> None:
    """As asyncio's BufferedProtocol does: into the splitter's buffers, as much as each offers."""
    while chunk:
        buf = machine.framing.get_buffer(-1)
        n = min(len(buf), len(chunk))
        buf[:n] = chunk[:n]
        machine.buffer_updated(n)
        chunk = chunk[n:]


_SETTINGS = settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
_CUTS = st.lists(st.integers(0, 1 << 16), max_size=12)


@_SETTINGS
@given(scenarios(), st.lists(_CUTS, min_size=12, max_size=12), st.booleans())
def test_client_events_do_not_depend_on_chunks(rounds, cuts, buffers):
    actions = _client_actions(rounds)
    wire, expected, _, _ = _play(actions)
    client = ClientConnection(client_id="p")
    events = []
    for i, (round_actions, (sent, answered)) in enumerate(zip(actions, wire, strict=True)):
        assert b"".join(_send(client, action) for action in round_actions) == sent
        for chunk in _split(answered, cuts[i % len(cuts)]):
            if buffers:
                _feed_buffers(client, chunk)
            else:
                client.receive_data(chunk)
            events += _drain(client)
    assert events == expected
    kinds = {type(e) for e in events}
    assert kinds <= {ResponseReceived, SaslTokenReceived, UnawaitedResponse}


@_SETTINGS
@given(scenarios(), _CUTS, st.booleans())
def test_server_events_do_not_depend_on_chunks(rounds, cuts, buffers):
    """The whole client stream at once, in any chunks (a client that pipelines everything): the
    server still reads a SASL token as one, since it reads each frame after answering the ones
    before it."""
    actions = _client_actions(rounds)
    wire, _, expected, _ = _play(actions)
    server = ServerConnection()
    events, answers, tokens_left = [], [], [0]
    for chunk in _split(b"".join(sent for sent, _ in wire), cuts):
        if buffers:
            _feed_buffers(server, chunk)
        else:
            server.receive_data(chunk)
        answers += _serve(server, events, tokens_left)
    assert events == expected
    assert b"".join(answers) == b"".join(answered for _, answered in wire)


@_SETTINGS
@given(scenarios(), st.lists(_CUTS, min_size=24, max_size=24))
def test_observer_events_do_not_depend_on_chunks(rounds, cuts):
    actions = _client_actions(rounds)
    wire, client_events, server_events, expected = _play(actions)
    observer = ObserverConnection()
    events = []
    for i, (sent, answered) in enumerate(wire):
        for data, from_client, c in ((sent, True, cuts[(2 * i) % 24]), (answered, False, cuts[(2 * i + 1) % 24])):
            for chunk in _split(data, c):
                observer.receive_data(chunk, from_client=from_client)
                events += _drain(observer)
    assert events == expected
    # The observer sees what each side saw: the server's requests and tokens, the client's answers.
    def requests(seen):
        return [(e.frame, e.header) for e in seen if isinstance(e, RequestReceived)]

    assert requests(events) == requests(server_events)
    assert [e.frame for e in events if isinstance(e, ResponseReceived)] == \
        [e.frame for e in client_events if isinstance(e, ResponseReceived)]
