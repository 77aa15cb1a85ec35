"""The network layer against bad peers: garbage, forged sizes, truncated frames, unknown api keys
and versions, many idle connections.  Each bad connection is closed (or answered) and logged,
and the broker keeps serving a well-behaved client on another connection throughout."""

from __future__ import annotations

import logging
import random
import socket
import struct
import time

import pytest

from kwire.broker import EmbeddedBroker
from kwire.protocol import encode_request, messages
from kwire.protocol.frames import decode_response
from tests.waiting import wait_for


def _connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _read_frame(s: socket.socket) -> bytes:
    def exact(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    size = struct.unpack(">i", exact(4))[0]
    return exact(size)


def _call(s: socket.socket, request, version: int, correlation_id: int = 1):
    s.sendall(encode_request(request, version, correlation_id))
    _, resp = decode_response(_read_frame(s), request.API_KEY, version)
    return resp


def _closed_by_peer(s: socket.socket, timeout: float = 5) -> bool:
    s.settimeout(timeout)
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _healthy(port: int) -> bool:
    with _connect(port) as s:
        resp = _call(s, messages.MetadataRequest(topics=None), 12)
        return resp.brokers[0].port == port


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("net") / "data", max_request_size=1 << 20) as b:
        yield b


_GARBAGE = random.Random(7).randbytes(4092)
_METADATA_HEADER = messages.RequestHeader(request_api_key=3, request_api_version=12, correlation_id=1,
                                          client_id="x").encode(2)


@pytest.mark.parametrize("payload,logged", [
    pytest.param(struct.pack(">i", len(_GARBAGE)) + _GARBAGE, "unknown api key", id="random-bytes"),
    pytest.param(struct.pack(">i", 0x7FFFFFF0) + b"x" * 100, "over the maximum", id="huge-length"),
    pytest.param(struct.pack(">i", -5), "negative frame size", id="negative-length"),
    pytest.param(struct.pack(">i", 2 << 20) + b"\0" * 10, "over the maximum", id="over-max-request-size"),
    pytest.param(struct.pack(">i", 3) + b"abc", "unreadable request header", id="short-header"),
    pytest.param(struct.pack(">ihhi", 8, 999, 0, 1), "unknown api key 999", id="unknown-api-key"),
    pytest.param(struct.pack(">ihhi", 8, 3, 99, 1), "MetadataRequest v99 is unknown", id="unknown-version"),
    pytest.param(struct.pack(">i", len(_METADATA_HEADER) + 5) + _METADATA_HEADER + b"\xff\xff\xff\xff\x07",
                 "malformed MetadataRequest", id="malformed-body"),
])
def test_bad_input_closes_that_connection_only(broker, payload, logged, caplog):
    caplog.set_level(logging.WARNING, logger="kwire.broker.network")
    good = _connect(broker.port)
    bad = _connect(broker.port)
    bad.sendall(payload)
    assert _closed_by_peer(bad)
    bad.close()
    # The connection opened before the bad one still works, and so do new ones.
    assert _call(good, messages.ApiVersionsRequest(), 3).error_code == 0
    good.close()
    assert _healthy(broker.port)
    messages_logged = [r.getMessage() for r in caplog.records]
    assert any("closing connection" in m and logged in m for m in messages_logged), messages_logged


def test_truncated_frame_then_disconnect(broker):
    bad = _connect(broker.port)
    bad.sendall(encode_request(messages.MetadataRequest(topics=None), 12, 1)[:-3])
    bad.shutdown(socket.SHUT_WR)
    assert _closed_by_peer(bad)
    bad.close()
    assert _healthy(broker.port)


def test_unserved_api_gets_an_error_response(broker):
    with _connect(broker.port) as s:
        # BrokerHeartbeat: controller-only, never served by a broker listener.  (was ElectLeaders,
        # then CreateDelegationToken, then UnregisterBroker, all answered since)
        resp = _call(s, messages.BrokerHeartbeatRequest(broker_id=1, broker_epoch=1), 0)
        assert resp.error_code == 35  # UNSUPPORTED_VERSION
        # The connection stays usable.
        assert _call(s, messages.ApiVersionsRequest(), 3, correlation_id=2).error_code == 0


def test_pipelined_requests_are_answered_in_order(broker):
    with _connect(broker.port) as s:
        reqs = [(messages.ApiVersionsRequest(), 3), (messages.MetadataRequest(topics=None), 12)] * 20
        s.sendall(b"".join(encode_request(r, v, i) for i, (r, v) in enumerate(reqs)))
        for i, (r, v) in enumerate(reqs):
            body = _read_frame(s)
            assert int.from_bytes(body[:4], "big") == i
            decode_response(body, r.API_KEY, v)


def test_hundreds_of_idle_connections_do_not_stop_service(broker):
    idle = [_connect(broker.port) for _ in range(300)]
    try:
        t0 = time.monotonic()
        assert _healthy(broker.port)
        assert time.monotonic() - t0 < 30  # bounded wait, not a speed claim
        # Half of them send half a frame and stall: still no effect on others.
        for s in idle[::2]:
            s.sendall(struct.pack(">i", 100) + b"\0\3")
        assert _healthy(broker.port)
    finally:
        for s in idle:
            s.close()
    assert _healthy(broker.port)


def test_bytes_after_a_request_are_ignored_as_kafka_does(broker):
    # librdkafka's AdminClient sends Metadata v13 with 3 extra bytes; Kafka answers it, so must we.
    frame = encode_request(messages.MetadataRequest(topics=None), 13, 9)
    padded = struct.pack(">i", len(frame) - 4 + 3) + frame[4:] + b"\0\0\0"
    with _connect(broker.port) as s:
        s.sendall(padded)
        _, resp = decode_response(_read_frame(s), 3, 13)
        assert resp.brokers[0].node_id == 1


def _produce_request(topic: str, records: bytes):
    R = messages.ProduceRequest
    return R(acks=1, timeout_ms=1000, topic_data=[R.TopicProduceData(name=topic, partition_data=[
        R.TopicProduceData.PartitionProduceData(index=0, records=records)])])


def _batches(count: int, value_size: int) -> bytes:
    from kwire.protocol.records import RecordBatchBuilder

    out = b""
    for i in range(count):
        b = RecordBatchBuilder()
        for j in range(10):
            b.append(b"k", bytes([i, j]) * (value_size // 2), timestamp=1_700_000_000_000 + j)
        out += b.build()
    return out


@pytest.mark.parametrize("chunk", [1, 997, 65536, None], ids=["byte-by-byte-header", "997", "64KiB", "whole"])
def test_large_requests_in_any_pieces_with_small_ones_behind_them(broker, chunk):
    from kwire.protocol.records import iter_batches

    topic = f"pieces-{chunk}"
    records = _batches(8, 8000)  # ~640 KB: several reads, received into the frame's own buffer
    with _connect(broker.port) as s:
        _call(s, messages.MetadataRequest(topics=[messages.MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
        stream = (encode_request(_produce_request(topic, records), 9, 10)
                  + encode_request(messages.ApiVersionsRequest(), 3, 11)
                  + encode_request(_produce_request(topic, records), 9, 12))
        if chunk == 1:  # the first 100 bytes one at a time, then the rest at once
            for i in range(100):
                s.sendall(stream[i:i + 1])
            s.sendall(stream[100:])
        else:
            step = chunk or len(stream)
            for i in range(0, len(stream), step):
                s.sendall(stream[i:i + step])
        answers = [decode_response(_read_frame(s), key, v) for key, v in ((0, 9), (18, 3), (0, 9))]
    assert [h.correlation_id for h, _ in answers] == [10, 11, 12]
    assert [r.responses[0].partition_responses[0].base_offset for h, r in (answers[0], answers[2])] == [0, 80]
    log = broker.call(broker.state.logs.get, topic, 0)
    stored = b"".join(piece.read() for piece in broker.call(log.read, 0, 1 << 22))
    got = list(iter_batches(stored))
    assert [b.base_offset for b in got] == list(range(0, 160, 10))
    for b in got:
        b.validate()
    expected_values = [r.value for b in iter_batches(records) for r in b] * 2
    assert [r.value for b in got for r in b] == expected_values


# -- the shared budget for large requests (queued_max_request_bytes) ------------------------------

@pytest.fixture
def small_budget_broker(tmp_path):
    # 1 MiB requests at most, 2 MiB of them in memory at once over all connections.
    with EmbeddedBroker(tmp_path / "data", max_request_size=1 << 20, queued_max_request_bytes=2 << 20) as b:
        yield b


def _memory(broker):
    registry = broker.broker._connections
    return broker.call(lambda: (registry.memory.used, len(registry.memory.waiting)))


def test_announced_large_requests_cannot_take_more_than_the_budget(small_budget_broker):
    broker = small_budget_broker
    # 40 connections each announce a 900 KB request and send 10 bytes of it: without a budget
    # that is 36 MB allocated for requests that never come.
    flood = [_connect(broker.port) for _ in range(40)]
    try:
        for s in flood:
            s.sendall(struct.pack(">i", 900_000) + b"\0" * 10)
        used, waiting = wait_for(lambda: (lambda m: m if m[0] + m[1] and m[1] >= 38 else None)(_memory(broker)),
                                  "the flooding connections to wait for memory")
        assert used <= 2 * 900_000  # two frames fit the 2 MiB budget; the other 38 wait unallocated
        assert waiting == 38
        assert _healthy(broker.port)  # small requests never wait
    finally:
        for s in flood:
            s.close()
    # Closing them gives everything back.
    assert wait_for(lambda: _memory(broker) == (0, 0), "memory to be released", timeout=20)


def test_large_requests_over_the_budget_wait_their_turn_and_are_all_answered(small_budget_broker):
    broker = small_budget_broker
    topic = "budget"
    records = _batches(1, 60_000)  # ~600 KB per request: three at once are over the 2 MiB budget
    with _connect(broker.port) as s:
        _call(s, messages.MetadataRequest(topics=[messages.MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
    conns = [_connect(broker.port) for _ in range(8)]
    try:
        frame = encode_request(_produce_request(topic, records), 9, 5)
        for s in conns:  # everything sent before anything is read: the broker must queue them
            s.sendall(frame[:len(frame) // 2])
        for s in conns:
            s.sendall(frame[len(frame) // 2:])
        offsets = []
        for s in conns:
            _, resp = decode_response(_read_frame(s), 0, 9)
            part = resp.responses[0].partition_responses[0]
            assert part.error_code == 0
            offsets.append(part.base_offset)
    finally:
        for s in conns:
            s.close()
    assert sorted(offsets) == list(range(0, 80, 10))
    assert wait_for(lambda: _memory(broker) == (0, 0), "memory to be released", timeout=20)


# -- Fetch answers: file ranges with sendfile, at once or as the socket makes room ----------------
# Loopback peers get file ranges written from a map of the segment file, others os.sendfile; the
# tests below connect over loopback and run each way, the peer's kind set through _is_loopback.

@pytest.fixture(params=["mapped", "sendfile"])
def file_sending(request, monkeypatch):
    """Which way file ranges go out; the other way's function fails the test if it is used."""
    from kwire.broker import network

    mapped = request.param == "mapped"
    monkeypatch.setattr(network, "_is_loopback", lambda peer: mapped)
    wrong: list[str] = []
    unused = "_sendfile_now" if mapped else "_send_mapped_now"

    def used_wrongly(*args):
        wrong.append(unused)
        return 0

    monkeypatch.setattr(network, unused, used_wrongly)
    yield request.param
    assert not wrong, f"{request.param} connections used {unused}"


def test_only_loopback_peers_are_sent_mapped_ranges():
    from kwire.broker.network import _is_loopback

    assert _is_loopback(("127.0.0.1", 5000)) and _is_loopback(("127.8.9.1", 1))
    assert _is_loopback(("::1", 5000, 0, 0)) and _is_loopback(("::ffff:127.0.0.1", 5000, 0, 0))
    assert not _is_loopback(("10.1.2.3", 5000)) and not _is_loopback(("fe80::1", 1, 0, 2))
    assert not _is_loopback(("::ffff:10.1.2.3", 5000, 0, 0))
    assert not _is_loopback("/tmp/socket") and not _is_loopback(("not-an-address", 1))


def _fill_partitions(port: int, topic: str, batches_per_partition: list[int]) -> None:
    """A topic with a partition per item of ``batches_per_partition``, holding that many batches of
    10 ~8 KB records."""
    C = messages.CreateTopicsRequest
    R = messages.ProduceRequest
    with _connect(port) as s:
        created = _call(s, C(timeout_ms=5000, topics=[C.CreatableTopic(
            name=topic, num_partitions=len(batches_per_partition), replication_factor=1)]), 5)
        assert created.topics[0].error_code == 0
        for p, count in enumerate(batches_per_partition):
            for i in range(count):
                req = R(acks=1, timeout_ms=1000, topic_data=[R.TopicProduceData(name=topic, partition_data=[
                    R.TopicProduceData.PartitionProduceData(index=p, records=_batches(1, 8000))])])
                assert _call(s, req, 9, correlation_id=i).responses[0].partition_responses[0].error_code == 0


def _fetch_request(topic: str, partitions: int, partition_max_bytes: int):
    R = messages.FetchRequest
    parts = [R.FetchTopic.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=partition_max_bytes)
             for p in range(partitions)]
    return R(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=64 << 20, session_epoch=-1,
             topics=[R.FetchTopic(topic=topic, partitions=parts)])


def _stored(broker, topic: str, partition: int, max_bytes: int) -> bytes:
    log = broker.call(broker.state.logs.get, topic, partition)
    return b"".join(piece.read() for piece in broker.call(log.read, 0, max_bytes))


@pytest.mark.parametrize("wait", [0.0, 0.5], ids=["read-at-once", "socket-full"])
def test_fetch_answers_go_out_whole_and_in_order(broker, wait, file_sending):
    """Three partitions (one of ~4 MB, more than the sockets hold, two small) in two pipelined
    Fetch answers with a Metadata answer between them.  A client that waits before reading leaves
    the broker's socket full in the middle of a file range: the rest must follow from where it
    stopped, and the next answers after it."""
    from kwire.protocol.records import iter_batches

    topic = f"fetch-out-{wait}-{file_sending}"
    expected_counts = [50, 2, 1]
    _fill_partitions(broker.port, topic, expected_counts)
    fetch = _fetch_request(topic, 3, 8 << 20)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel's smallest: fills at once
        s.settimeout(10)
        s.connect(("127.0.0.1", broker.port))
        s.sendall(encode_request(fetch, 12, 1) + encode_request(messages.MetadataRequest(topics=None), 12, 2)
                  + encode_request(fetch, 12, 3))
        time.sleep(wait)
        answers = [decode_response(_read_frame(s), key, 12) for key in (1, 3, 1)]
    assert [h.correlation_id for h, _ in answers] == [1, 2, 3]
    for _, resp in (answers[0], answers[2]):
        parts = resp.responses[0].partitions
        assert [p.error_code for p in parts] == [0, 0, 0]
        for p in parts:
            assert bytes(p.records) == _stored(broker, topic, p.partition_index, 8 << 20)
        assert [len(list(iter_batches(bytes(p.records)))) for p in parts] == expected_counts
    assert answers[1][1].brokers[0].port == broker.port
    assert _healthy(broker.port)


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_client_leaving_in_the_middle_of_a_fetch_answer_hurts_no_one(broker, how, file_sending):
    """The broker is part-way through a file range (the socket full) when the client goes: that
    connection ends, the next clients are served, their answers whole."""
    topic = f"fetch-leave-{how}-{file_sending}"
    _fill_partitions(broker.port, topic, [40])
    fetch = _fetch_request(topic, 1, 8 << 20)
    for _ in range(3):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(10)
        s.connect(("127.0.0.1", broker.port))
        s.sendall(encode_request(fetch, 12, 1) + encode_request(fetch, 12, 2))
        assert len(s.recv(1000)) > 0  # the answer has begun
        time.sleep(0.2)
        if how == "reset":
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    assert _healthy(broker.port)
    with _connect(broker.port) as s:
        s.settimeout(10)
        s.sendall(encode_request(fetch, 12, 7))
        _, resp = decode_response(_read_frame(s), 1, 12)
    assert bytes(resp.responses[0].partitions[0].records) == _stored(broker, topic, 0, 8 << 20)


def test_a_half_closed_connection_still_has_its_requests_served_and_answered(broker):
    """A client may end its side once its requests are written (``nc -N``; kwire's producer after
    acks=0 requests).  As Kafka, every request before that end is served, and answered on the
    side still open, even while an earlier one waits: here a long-polling Fetch."""
    topic = "half-closed"
    C = messages.CreateTopicsRequest
    with _connect(broker.port) as s:
        created = _call(s, C(timeout_ms=5000, topics=[C.CreatableTopic(
            name=topic, num_partitions=1, replication_factor=1)]), 5)
        assert created.topics[0].error_code == 0
    R = messages.FetchRequest
    fetch = R(replica_id=-1, max_wait_ms=300, min_bytes=1, max_bytes=1 << 20, session_epoch=-1,
              topics=[R.FetchTopic(topic=topic, partitions=[R.FetchTopic.FetchPartition(
                  partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    produce = _produce_request(topic, _batches(1, 100))
    produce.acks = 0
    s = _connect(broker.port)
    try:
        s.sendall(encode_request(fetch, 11, 1)
                  + b"".join(encode_request(produce, 9, 2 + i) for i in range(5))
                  + encode_request(messages.ApiVersionsRequest(), 3, 7))
        s.shutdown(socket.SHUT_WR)
        header, answer = decode_response(_read_frame(s), fetch.API_KEY, 11)
        assert header.correlation_id == 1 and answer.responses[0].partitions[0].error_code == 0
        header, answer = decode_response(_read_frame(s), 18, 3)
        assert header.correlation_id == 7 and answer.error_code == 0
        assert _closed_by_peer(s)
    finally:
        s.close()
    log = broker.call(broker.state.logs.get, topic, 0)
    assert broker.call(lambda: log.log_end_offset) == 50  # 5 batches of 10 records


# -- per-connection problems in the log: a flood is summarised ------------------------------------

class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _problem_log(caplog, **kw):
    from kwire.broker.log_limiter import ProblemLog

    caplog.set_level(logging.INFO, logger="test.problems")
    clock = _Clock()
    return ProblemLog(logging.getLogger("test.problems"), clock=clock, **kw), clock


def _logged(caplog, name: str = "test.problems") -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name]


def test_problem_log_writes_a_few_of_each_kind_in_full_then_a_count(caplog):
    problems, clock = _problem_log(caplog, burst=3, interval_s=10)
    for i in range(50):
        problems.log(logging.WARNING, "bad frame", "frame %d", i)
        if i % 5 == 0:
            problems.log(logging.INFO, "left", "left %d", i)
        clock.now += 0.1  # 50 problems in 5 s: one interval
    assert _logged(caplog) == ["frame 0", "left 0", "frame 1", "frame 2", "left 5", "left 10"]
    clock.now += 5
    problems.flush()
    assert _logged(caplog)[6:] == ["... and 47 more like it (bad frame) in the last 10 s",
                                   "... and 7 more like it (left) in the last 10 s"]
    # The summary takes the level of what it counts.
    assert [r.levelno for r in caplog.records[6:]] == [logging.WARNING, logging.INFO]
    # A new interval starts with lines in full again; nothing more to summarise: nothing written.
    problems.log(logging.WARNING, "bad frame", "frame again")
    clock.now += 20
    problems.flush()
    assert _logged(caplog)[8:] == ["frame again"]


def test_problem_log_summarises_an_ended_interval_before_the_next_problem_and_at_close(caplog):
    problems, clock = _problem_log(caplog, burst=1, interval_s=10)
    for _ in range(4):
        problems.log(logging.WARNING, "bad frame", "frame")
    clock.now += 12
    problems.log(logging.WARNING, "bad frame", "frame later")  # no flush in between: the count comes first
    problems.log(logging.WARNING, "bad frame", "frame later")
    clock.now += 2
    problems.close()  # at shutdown: what is still counted, over the time it covers
    assert _logged(caplog) == ["frame", "... and 3 more like it (bad frame) in the last 10 s", "frame later",
                               "... and 1 more like it (bad frame) in the last 2 s"]


def test_problem_log_writes_the_count_from_the_event_loop_when_the_interval_ends(caplog):
    import asyncio

    from kwire.broker.log_limiter import ProblemLog

    caplog.set_level(logging.INFO, logger="test.problems")

    async def flood() -> None:
        problems = ProblemLog(logging.getLogger("test.problems"), burst=2, interval_s=0.05)
        for i in range(10):
            problems.log(logging.WARNING, "bad frame", "frame %d", i)
        for _ in range(100):  # bounded: the timer fires after 0.05 s
            if len(_logged(caplog)) == 3:
                break
            await asyncio.sleep(0.01)

    asyncio.run(flood())
    assert _logged(caplog) == ["frame 0", "frame 1", "... and 8 more like it (bad frame) in the last 0.05 s"]


def test_a_flood_of_bad_connections_logs_a_bounded_number_of_lines_with_the_counts(tmp_path, caplog):
    """120 bad connections of two kinds: ten lines of each in full, then one line with the count
    of the rest of each; and the broker still serves."""
    from kwire.broker.log_limiter import DEFAULT_BURST

    caplog.set_level(logging.INFO, logger="kwire.broker.network")
    with EmbeddedBroker(tmp_path / "data", max_request_size=1 << 20) as b:
        problems = b.broker._connections.problems
        clock = _Clock()
        b.call(setattr, problems, "clock", clock)  # the flood in one interval, however slow the machine
        for i in range(120):
            with _connect(b.port) as s:
                # Half send a negative size (a bad frame), half an unknown api key (a refused request).
                s.sendall(struct.pack(">i", -5) if i % 2 else struct.pack(">ihhi", 8, 999, 0, 1))
                assert _closed_by_peer(s)
        wait_for(lambda: b.call(lambda: not b.broker._connections.open), "the bad connections to be closed")
        assert _healthy(b.port)
        clock.now += 10
        b.call(problems.flush)
        lines = _logged(caplog, "kwire.broker.network")
    frames = [m for m in lines if "closing connection" in m and "negative frame size" in m]
    refused = [m for m in lines if "closing connection" in m and "unknown api key 999" in m]
    assert len(frames) == len(refused) == DEFAULT_BURST
    summaries = [m for m in lines if m.startswith("... and")]
    assert sorted(summaries) == [f"... and {60 - DEFAULT_BURST} more like it (bad frame) in the last 10 s",
                                 f"... and {60 - DEFAULT_BURST} more like it (refused request) in the last 10 s"]
    assert len([m for m in lines if "closing connection" in m or m.startswith("...")]) == 2 * DEFAULT_BURST + 2
