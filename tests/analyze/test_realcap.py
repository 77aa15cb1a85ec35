"""The capture harness of the real-client tests (realcap.py): what it leaves out of a capture."""

from __future__ import annotations

import socket

from .realcap import capture, established_connections


def _listener() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    return server


def _client(port: int, server: socket.socket) -> tuple[socket.socket, socket.socket]:
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    client.bind(("127.0.0.1", port))
    client.connect(server.getsockname())
    accepted, _ = server.accept()
    return client, accepted


def test_a_connection_open_before_the_capture_is_left_out_but_not_its_client_port(tmp_path) -> None:
    """The kernel hands a client port in use towards one server to a new connection towards
    another.  Leaving out the earlier connection by its client port alone hid the later one (a
    kcat scenario lost a Produce that way); by its pair of ports, only it is left out."""
    first_server, second_server = _listener(), _listener()
    servers = [s.getsockname()[1] for s in (first_server, second_server)]
    old, old_peer = _client(0, first_server)
    port = old.getsockname()[1]
    new = new_peer = None
    try:
        excluded = established_connections(servers)
        assert excluded == {(port, servers[0])}
        with capture(servers, tmp_path / "cap.pcap", exclude_connections=excluded) as cap:
            new, new_peer = _client(port, second_server)  # the same client port, another server
            assert new.getsockname()[1] == port
            new.sendall(b"sent-on-the-new-connection")
            old.sendall(b"sent-on-the-old-connection")
            assert new_peer.recv(100) == b"sent-on-the-new-connection"
            assert old_peer.recv(100) == b"sent-on-the-old-connection"
        data = cap.path.read_bytes()
        assert b"sent-on-the-new-connection" in data
        assert b"sent-on-the-old-connection" not in data
    finally:
        for s in (old, old_peer, new, new_peer, first_server, second_server):
            if s is not None:
                s.close()
