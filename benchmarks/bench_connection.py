"""The connection machine's cost per frame (kwire.protocol.connection), against what each driver did
before it, side by side in one run, alternated.

- server: ``ServerConnection.request_event(frame)`` (the header read, and the event the broker's
  dispatch takes) against ``decode_request_header(frame)`` alone, what dispatch called before;
  a Produce frame of 1 KiB and a Metadata frame.
- client: ``ClientConnection.send_request`` + ``response_event`` (encode, pair, the event) against
  ``encode_request`` + the correlation check and an OrderedDict of pending requests, what
  ``BrokerConnection`` did before; a Metadata request and its answer.

    python benchmarks/bench_connection.py [--frames 200000] [--rounds 5]

Prints microseconds per frame (best of the rounds) and the ratio machine/before (<1.1: within the
noise of a loaded machine).
"""

from __future__ import annotations

import argparse
import collections
import struct
import time

from kwire.protocol import messages
from kwire.protocol.connection import ClientConnection, ServerConnection
from kwire.protocol.frames import decode_request_header, encode_request, encode_response

_INT32 = struct.Struct(">i")


def _produce_frame() -> bytes:
    data = messages.ProduceRequest.TopicProduceData
    request = messages.ProduceRequest(acks=1, timeout_ms=100, topic_data=[data(name="t", partition_data=[
        data.PartitionProduceData(index=0, records=b"\0" * 1024)])])
    return encode_request(request, 9, 7, "bench")[4:]


def _metadata_frame() -> bytes:
    return encode_request(messages.MetadataRequest(topics=[]), 12, 7, "bench")[4:]


def _server_before(frame, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        decode_request_header(frame)
    return time.perf_counter() - start


def _server_machine(frame, n: int) -> float:
    wire = ServerConnection()
    request_event = wire.request_event
    start = time.perf_counter()
    for _ in range(n):
        request_event(frame)
    return time.perf_counter() - start


_REQUEST = messages.MetadataRequest(topics=[])


def _answers(n: int) -> list[bytes]:
    """The broker's answers to correlation ids 1..n (frame bodies)."""
    template = bytearray(encode_response(messages.MetadataResponse(), 12, 0)[4:])
    out = []
    for cid in range(1, n + 1):
        _INT32.pack_into(template, 0, cid)
        out.append(bytes(template))
    return out


def _client_before(answers: list[bytes]) -> float:
    pending: collections.OrderedDict = collections.OrderedDict()
    cid = 0
    start = time.perf_counter()
    for answer in answers:
        cid += 1
        encode_request(_REQUEST, 12, cid, "bench")
        pending[cid] = (3, 12, None)
        got = _INT32.unpack_from(answer, 0)[0]
        if next(iter(pending)) != got:
            raise AssertionError("out of order")
        pending.pop(got)
    return time.perf_counter() - start


def _client_machine(answers: list[bytes]) -> float:
    wire = ClientConnection(client_id="bench")
    send, receive = wire.send_request, wire.response_event
    start = time.perf_counter()
    for answer in answers:
        send(_REQUEST, 12)
        receive(answer)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=200_000, help="frames per timing (default 200,000)")
    parser.add_argument("--rounds", type=int, default=5, help="alternated rounds; best kept (default 5)")
    args = parser.parse_args()
    n = args.frames
    produce, metadata, answers = _produce_frame(), _metadata_frame(), _answers(n)
    cases = {
        "server: Produce 1 KiB frame": (lambda: _server_before(produce, n), lambda: _server_machine(produce, n)),
        "server: Metadata v12 frame": (lambda: _server_before(metadata, n), lambda: _server_machine(metadata, n)),
        "client: Metadata v12 sent + answer paired": (lambda: _client_before(answers),
                                                      lambda: _client_machine(answers)),
    }
    print(f"{'per frame (us), best of ' + str(args.rounds):44} {'before':>8} {'machine':>8} {'ratio':>7}")
    for name, (before, machine) in cases.items():
        best_before = best_machine = float("inf")
        for _ in range(args.rounds):
            best_before = min(best_before, before())
            best_machine = min(best_machine, machine())
        b, m = best_before / n * 1e6, best_machine / n * 1e6
        print(f"{name:44} {b:8.3f} {m:8.3f} {m / b:6.2f}x")


if __name__ == "__main__":
    main()
