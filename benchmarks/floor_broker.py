"""``kwire broker`` with Produce answered without storing anything: the floor of ``bench_broker_floor.py``.

Run as ``python benchmarks/floor_broker.py [--uvloop] broker [kwire broker options]``.  Everything but
Produce is kwire's broker as shipped (ApiVersions, Metadata, topics, Fetch).  A Produce request
is read by kwire's network layer and decoded by kwire's codec as usual (records stay views of
the request), and then, instead of the handler (checks, the log's append, its indexes), it gets
a success answer encoded once per (version, acks, topics and partitions) and reused with the
request's correlation id: what kwire's network layer and codec cost with storage made free.
The base offsets in those answers are all 0 and nothing can be read back: a measuring
instrument, not a broker.
"""

from __future__ import annotations

import sys

import kwire.broker.network as network
from kwire.broker.dispatch import CloseConnection, Reply
from kwire.cli.main import main
from kwire.protocol import messages
from kwire.protocol.errors import ProtocolError
from kwire.protocol.frames import decode_request_header, encode_response_parts

PRODUCE = 0
_served_by_kwire = network.dispatch
_answers: dict[tuple, bytes] = {}


def _success(request, version: int) -> bytes:
    R = messages.ProduceResponse  # noqa: N806 - the generated class's name
    topics = []
    for td in request.topic_data:
        t = R.TopicProduceResponse(name=td.name, partition_responses=[
            R.TopicProduceResponse.PartitionProduceResponse(
                index=pd.index, error_code=0, base_offset=0, log_append_time_ms=-1, log_start_offset=0,
                record_errors=[], error_message=None)
            for pd in td.partition_data])
        if version >= 13:
            t.topic_id = td.topic_id
        topics.append(t)
    parts = encode_response_parts(R(responses=topics, throttle_time_ms=0), version, 0)
    return b"".join(parts)


def dispatch_without_storage(state, frame, **kwargs):
    if len(frame) < 4 or frame[0] != 0 or frame[1] != PRODUCE:
        return _served_by_kwire(state, frame, **kwargs)
    try:
        header, offset = decode_request_header(frame)
        version = header.request_api_version
        request, _end = messages.ProduceRequest.codec(version).decode(frame, offset, strict=False, record_views=True)
    except ProtocolError as exc:
        raise CloseConnection(f"malformed Produce: {exc}") from None
    if request.acks == 0:
        return None
    key = (version, request.acks, tuple((td.name, td.topic_id if version >= 13 else None,
                                         tuple(pd.index for pd in td.partition_data)) for td in request.topic_data))
    answer = _answers.get(key)
    if answer is None:
        answer = _answers[key] = _success(request, version)
    out = bytearray(answer)
    out[4:8] = header.correlation_id.to_bytes(4, "big", signed=True)  # after the size prefix
    return Reply(PRODUCE, version, header.correlation_id, [bytes(out)])


if __name__ == "__main__":
    network.dispatch = dispatch_without_storage
    args = sys.argv[1:]
    if args[:1] == ["--uvloop"]:  # the same, on uvloop's event loop (libuv, in C) instead of asyncio's
        import asyncio

        import uvloop

        asyncio.run = uvloop.run
        args = args[1:]
    sys.exit(main(args))
