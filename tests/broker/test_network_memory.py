"""Memory held for large requests of connections that are gone.

A connection that announces a large request and waits for the request-memory budget
(``queued_max_request_bytes``) must not get its frame buffer once it has left: when the budget
frees, its place passes on without anything being allocated for it, and what it was granted
before it left goes with it at once, not when the cyclic garbage collector finds it.  Two checks:
one in process that counts what RequestMemory grants and what is allocated (tracemalloc, the
cyclic collector off so nothing is freed by chance), one of a broker process's peak RSS.
"""

from __future__ import annotations

import gc
import os
import socket
import struct
import subprocess
import sys
import textwrap
import tracemalloc

import pytest

from kwire.broker import EmbeddedBroker
from tests.waiting import wait_for

MiB = 1 << 20


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def _announce(port: int, size: int, count: int) -> list[socket.socket]:
    """``count`` connections that each announce a request of ``size`` bytes and send 10 of them."""
    socks = [_connect(port) for _ in range(count)]
    for s in socks:
        s.sendall(struct.pack(">i", size) + b"\0" * 10)
    return socks


def _memory(broker) -> tuple[int, int]:
    memory = broker.broker._connections.memory
    return broker.call(lambda: (memory.used, len(memory.waiting)))


def _reset(s: socket.socket) -> None:
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


@pytest.fixture
def broker(tmp_path):
    # Frames up to 4 MiB, 8 MiB of them at once: two 3.5 MiB requests fit, a third waits.
    with EmbeddedBroker(tmp_path / "data", max_request_size=4 * MiB, queued_max_request_bytes=8 * MiB) as b:
        yield b


@pytest.fixture
def no_cyclic_gc():
    """Only reference counting frees memory during the test: what a closed connection still holds
    shows, whenever the cyclic collector would have run."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


@pytest.mark.parametrize("how", ["close", "reset", "close-with-bytes-unread"])
def test_connections_that_left_while_waiting_for_memory_are_given_nothing(broker, no_cyclic_gc, how):
    memory = broker.broker._connections.memory
    grants_before = broker.call(lambda: memory.grants)
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        granted = _announce(broker.port, 3 * MiB + MiB // 2, 2)
        wait_for(lambda: _memory(broker)[0] == 7 * MiB, "the first two requests to get their buffers")
        waiting = _announce(broker.port, 3 * MiB + MiB // 2, 30)
        wait_for(lambda: _memory(broker)[1] == 30, "the other 30 to wait for memory")
        for s in waiting:  # they leave while waiting: reading from them is paused, nobody sees it yet
            if how == "close-with-bytes-unread":  # more of the frame than the broker has read, not all
                s.sendall(bytes(100_000))
            _reset(s) if how == "reset" else s.close()
        for s in granted:  # the budget frees: each waiting one in turn is asked whether it still wants it
            s.close()
        assert wait_for(lambda: _memory(broker) == (0, 0), "every place given up", timeout=20)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert broker.call(lambda: memory.grants) == grants_before + 2  # none for those that had left
    # The two granted buffers went with their connections, and nothing on the order of a frame
    # was allocated for the others (30 frames: 105 MiB); at no time more than the 8 MiB budget.
    assert current - base < MiB, (current - base) / MiB
    assert peak - base < 8 * MiB + MiB, (peak - base) / MiB


def test_a_connection_that_leaves_during_a_serve_lets_go_of_its_frame_buffer_at_once(broker, no_cyclic_gc):
    """A long-polling Fetch is being served while the next request, a large one, is half received
    into its own buffer; the client resets.  The budget and the buffer are given back at once."""
    from kwire.protocol import encode_request, messages

    R = messages.FetchRequest
    C = messages.CreateTopicsRequest
    with _connect(broker.port) as s:
        s.sendall(encode_request(C(timeout_ms=5000, topics=[C.CreatableTopic(
            name="parked", num_partitions=1, replication_factor=1)]), 5, 1))
        s.recv(1 << 16)
    fetch = R(replica_id=-1, max_wait_ms=30_000, min_bytes=1, max_bytes=1 << 20, session_epoch=-1,
              topics=[R.FetchTopic(topic="parked", partitions=[R.FetchTopic.FetchPartition(
                  partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        s = _connect(broker.port)
        s.sendall(encode_request(fetch, 11, 1) + struct.pack(">i", 3 * MiB) + bytes(MiB))
        wait_for(lambda: _memory(broker) == (3 * MiB, 0), "the large request to get its buffer")
        assert broker.call(lambda: [c.busy for c in broker.broker._connections.open]) == [True]  # the Fetch waits
        _reset(s)
        wait_for(lambda: _memory(broker) == (0, 0) and not broker.call(lambda: broker.broker._connections.open),
                 "the connection to be gone")
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert current - base < MiB, (current - base) / MiB


def test_a_connection_that_leaves_while_waiting_is_taken_off_the_queue(broker):
    """Without any memory being released: the waiting queue notices on its own."""
    granted = _announce(broker.port, 3 * MiB + MiB // 2, 2)
    wait_for(lambda: _memory(broker)[0] == 7 * MiB, "the first two requests to get their buffers")
    waiting = _announce(broker.port, 3 * MiB + MiB // 2, 3)
    wait_for(lambda: _memory(broker)[1] == 3, "three connections to wait for memory")
    try:
        waiting[0].close()
        _reset(waiting[1])
        wait_for(lambda: _memory(broker) == (7 * MiB, 1), "the two that left to be off the queue")
        open_ids = broker.call(lambda: sorted(c.id for c in broker.broker._connections.open))
        assert len(open_ids) == 3  # the two granted and the one still waiting
    finally:
        for s in (*granted, waiting[2]):
            s.close()
    assert wait_for(lambda: _memory(broker) == (0, 0), "every place given up", timeout=20)


def test_a_connection_still_there_gets_its_turn_after_those_that_left(broker):
    """The ones that left give their turn on; a client still waiting is served in full."""
    from kwire.protocol import encode_request, messages

    granted = _announce(broker.port, 3 * MiB + MiB // 2, 2)
    wait_for(lambda: _memory(broker)[0] == 7 * MiB, "the first two requests to get their buffers")
    gone = _announce(broker.port, 3 * MiB + MiB // 2, 5)
    wait_for(lambda: _memory(broker)[1] == 5, "five connections to wait for memory")
    # A real 3 MiB request (ApiVersions with padding: bytes after a request are ignored, as in Kafka).
    frame = encode_request(messages.ApiVersionsRequest(), 3, 42)
    padded = struct.pack(">i", len(frame) - 4 + 3 * MiB) + frame[4:] + bytes(3 * MiB)
    with _connect(broker.port) as client:
        client.sendall(padded[:100])
        wait_for(lambda: _memory(broker)[1] == 6, "the client to wait behind them")
        for s in gone + granted:
            s.close()
        client.sendall(padded[100:])
        size = struct.unpack(">i", client.recv(4, socket.MSG_WAITALL))[0]
        body = client.recv(size, socket.MSG_WAITALL)
    assert int.from_bytes(body[:4], "big") == 42
    assert wait_for(lambda: _memory(broker) == (0, 0), "every place given up", timeout=20)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    from tests.security.helpers import make_pki

    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.mark.parametrize("listener", ["SSL", "SASL_PLAINTEXT"])
def test_tls_and_sasl_connections_that_left_while_waiting_are_given_nothing(tmp_path, pki, listener):
    """The same on a TLS listener (asyncio's TLS layer reads the socket ahead of the connection,
    so it may see the client leave itself) and before a SASL login (frames up to 512 KiB)."""
    from tests.security.helpers import secure_broker, tls_context

    size = 400_000  # two fit the 1 MiB budget, a third waits
    with secure_broker(tmp_path / "data", pki, [f"{listener}://127.0.0.1:0"], max_request_size=4 * MiB,
                       queued_max_request_bytes=MiB) as b:
        memory = b.broker._connections.memory
        host, port = b.bootstrap_for(listener).rsplit(":", 1)
        context = tls_context(pki) if listener == "SSL" else None

        def announce(count: int) -> list[socket.socket]:
            socks = []
            for _ in range(count):
                s = socket.create_connection((host, int(port)), timeout=10)
                if context is not None:
                    s = context.wrap_socket(s, server_hostname="localhost")
                s.sendall(struct.pack(">i", size) + b"\0" * 10)
                socks.append(s)
            return socks

        granted = announce(2)
        wait_for(lambda: _memory(b)[0] == 2 * size, "the first two requests to get their buffers")
        waiting = announce(20)
        wait_for(lambda: _memory(b)[1] == 20, "the other 20 to wait for memory")
        for s in waiting + granted:
            s.close()
        assert wait_for(lambda: _memory(b) == (0, 0), "every place given up", timeout=20)
        assert b.call(lambda: (memory.grants, len(b.broker._connections.open))) == (2, 0)


def _socket_pair() -> tuple[socket.socket, socket.socket]:
    """Both ends of a TCP connection over loopback: (the broker's end, the client's)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname(), timeout=5)
        ours, _ = server.accept()
    return ours, client


def test_a_client_that_cannot_send_the_rest_of_its_frame_is_told_apart_from_one_that_can():
    from kwire.broker.network import _peer_cannot_send

    ours, client = _socket_pair()
    with ours, client:
        assert not _peer_cannot_send(ours.fileno(), 1000)  # there, nothing sent yet
        client.sendall(b"x" * 100)
        wait_for(lambda: _unread(ours) == 100, "the bytes to arrive")
        assert not _peer_cannot_send(ours.fileno(), 1000)  # there, sending
        client.shutdown(socket.SHUT_WR)  # half-closed: what it sent is all there will be
        wait_for(lambda: _peer_cannot_send(ours.fileno(), 101), "the end to arrive")
        assert not _peer_cannot_send(ours.fileno(), 100)  # the whole rest is there: it can complete
        assert ours.recv(1000) == b"x" * 100  # nothing was taken from the socket
    ours, client = _socket_pair()
    with ours:
        client.close()  # gone, nothing sent
        wait_for(lambda: _peer_cannot_send(ours.fileno(), 1), "the end to arrive")
    ours, client = _socket_pair()
    with ours:
        client.sendall(b"x" * 100)
        _reset(client)  # gone with a reset, bytes unread
        wait_for(lambda: _peer_cannot_send(ours.fileno(), 1), "the reset to arrive")


def _unread(sock: socket.socket) -> int:
    return len(sock.recv(1 << 16, socket.MSG_PEEK | socket.MSG_DONTWAIT))


_CHILD = textwrap.dedent("""
    import sys
    from kwire.broker import EmbeddedBroker

    with EmbeddedBroker(sys.argv[1], max_request_size=24 << 20, queued_max_request_bytes=32 << 20) as b:
        memory = b.broker._connections.memory
        print(b.port, flush=True)
        for line in sys.stdin:  # one line: print what the request memory holds; end of input: stop
            used, waiting = b.call(lambda: (memory.used, len(memory.waiting)))
            print(used, waiting, flush=True)
""")


def _peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM in /proc/<pid>/status")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/status")
def test_peak_rss_of_a_broker_stays_under_the_budget_when_waiting_connections_leave(tmp_path):
    """A broker process; 20 connections announce 20 MiB requests against a 32 MiB budget (one is
    granted, 19 wait) and leave.  Its peak RSS may grow by the budget and a margin, not by a frame
    for each of them (400 MiB)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(tmp_path / "data")], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)

    def memory() -> tuple[int, int]:
        child.stdin.write("?\n")
        child.stdin.flush()
        used, waiting = child.stdout.readline().split()
        return int(used), int(waiting)

    try:
        port = int(child.stdout.readline())
        base = _peak_rss(child.pid)
        flood = _announce(port, 20 * MiB, 20)
        wait_for(lambda: memory() == (20 * MiB, 19), "one request granted and 19 waiting")
        for s in flood:
            s.close()
        wait_for(lambda: memory() == (0, 0), "every place given up", timeout=30)
        grown = _peak_rss(child.pid) - base
    finally:
        child.stdin.close()
        try:
            child.wait(timeout=30)
        finally:
            if child.poll() is None:
                child.kill()
    assert grown < 32 * MiB + 24 * MiB, f"peak RSS grew by {grown / MiB:.0f} MiB"
