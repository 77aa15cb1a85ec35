"""Real captures (DeepFlow's test data): Kafka frames decode with kwire and agree with DeepFlow's
expected output; MongoDB frames split with the little-endian splitter.

The captures are read where they are (../shared/captures), never copied into the repository.
"""

from __future__ import annotations

import re
import struct

import pytest

from kwire.analyze import TO_CLIENT, TO_SERVER, Chunk, Gap, iter_tcp_streams, read_packets
from kwire.analyze.pcapwrite import PcapWriter
from kwire.protocol import (
    FrameSplitter,
    ProtocolError,
    api_name,
    correlation_id_of_response,
    decode_request,
    decode_response,
)

from .helpers import DEEPFLOW

KAFKA = sorted((DEEPFLOW / "kafka").glob("*.pcap"))
MONGO = sorted((DEEPFLOW / "mongo").glob("*.pcap"))



def test_the_shared_captures_are_there():
    # Never skip for missing data: CI has ../shared beside the clone, so absence is a failure.
    assert KAFKA and MONGO, f"captures not found under {DEEPFLOW}"

# Every capture here holds its requests: no response arrives without one.  (A capture starting
# mid-conversation would list its orphan responses here: they cannot be decoded without the
# request's api key and version.)
EXPECTED_UNPAIRED: dict[str, int] = {}

# How many Kafka messages each capture holds (requests + responses), whatever DeepFlow reports.
EXPECTED_MESSAGES = {"mixed-with-unsupported.pcap": 6}


def frames_in_capture_order(stream, splitters):
    """(frame number, direction, frame body) of a connection in capture order; gaps fail the test."""
    events = sorted(((e.frame, d, e) for d in (TO_SERVER, TO_CLIENT) for e in stream.chunks(d)),
                    key=lambda t: (t[0], t[1]))
    for frame, d, e in events:
        assert type(e) is Chunk, f"gap in connection {stream.conn}: {e}"
        for body in splitters[d].feed(e.data):
            yield frame, d, body


def detect_server_ports(path) -> set[int]:
    """The broker port of each connection: the side whose first frame is a valid Kafka request."""
    ports = set()
    for s in iter_tcp_streams(path):
        first = {}
        for _frame, d, body in frames_in_capture_order(s, (FrameSplitter(), FrameSplitter())):
            first.setdefault(d, body)
        valid = {}
        for d, body in first.items():
            try:
                decode_request(body)
                valid[d] = True
            except ProtocolError:  # not a request: this probe only looks for the broker side
                valid[d] = False
        if valid.get(TO_SERVER) and not valid.get(TO_CLIENT):
            ports.add(s.conn.server_port)
        elif valid.get(TO_CLIENT) and not valid.get(TO_SERVER):
            ports.add(s.conn.client_port)
    return ports


def decode_kafka(path, server_ports):
    """Every Kafka message in the capture: (frame, msg_type, correlation id, api name, version, client id,
    size), in capture order; and the correlation ids of responses without a request."""
    messages = []
    unpaired = []
    for s in iter_tcp_streams(path, server_ports=server_ports):
        assert s.conn.server_port in server_ports
        splitters = (FrameSplitter(), FrameSplitter())
        in_flight: dict[int, tuple[int, int]] = {}
        for frame, d, body in frames_in_capture_order(s, splitters):
            if d == TO_SERVER:
                header, request = decode_request(body)
                assert request.API_KEY == header.request_api_key
                in_flight[header.correlation_id] = (header.request_api_key, header.request_api_version)
                messages.append((frame, "Request", header.correlation_id, api_name(header.request_api_key),
                                 header.request_api_version, header.client_id or "", len(body)))
            else:
                cid = correlation_id_of_response(body)
                if cid not in in_flight:
                    unpaired.append(cid)
                    continue
                key, version = in_flight.pop(cid)
                header, response = decode_response(body, key, version)
                assert header.correlation_id == cid and response.API_KEY == key
                messages.append((frame, "Response", cid, api_name(key), version, "", len(body)))
        assert splitters[0].buffered == splitters[1].buffered == 0, "a frame was left incomplete"
        assert not in_flight, f"requests without a response: {in_flight}"
    messages.sort()
    return messages, unpaired


_KAFKA_INFO = re.compile(r'KafkaInfo \{ msg_type: (\w+), correlation_id: Some\((-?\d+)\), api_key: (\w+), '
                         r'api_version: (\d+), client_id: "([^"]*)",.*?req_msg_size: (None|Some\(\d+\)), '
                         r'resp_msg_size: (None|Some\(\d+\))')


def deepflow_kafka(result_path) -> list[tuple]:
    """DeepFlow's expected messages: (msg_type, correlation id, api name, version, client id, size)."""
    out = []
    for line in result_path.read_text().splitlines():
        if not line.startswith("KafkaInfo"):
            continue
        m = _KAFKA_INFO.match(line)
        assert m, f"unparsed line in {result_path.name}: {line[:120]}"
        msg_type, cid, name, version, client_id, req_size, resp_size = m.groups()
        size = req_size if msg_type == "Request" else resp_size
        out.append((msg_type, int(cid), name, int(version), client_id, int(size[5:-1])))
    return out


def test_kafka_server_ports_found_from_the_traffic():
    found = set()
    for path in KAFKA:
        found |= detect_server_ports(path)
    # 36333: the broker port of DeepFlow's test cluster (the SYN in 00-produce-v7-sw8 shows it).
    assert found == {9092, 36333}


@pytest.mark.parametrize("path", KAFKA, ids=lambda p: p.name)
def test_kafka_capture_decodes_and_agrees_with_deepflow(path):
    ports = detect_server_ports(path)
    assert len(ports) == 1
    messages, unpaired = decode_kafka(path, ports)
    assert len(unpaired) == EXPECTED_UNPAIRED.get(path.name, 0), unpaired
    assert len(messages) == EXPECTED_MESSAGES.get(path.name, 2)
    result = path.with_suffix(".result")
    if not result.exists():  # 01-fetch-v12-perf has no expected output: decoding is the test
        assert {m[1] for m in messages} == {"Request", "Response"}
        return
    expected = deepflow_kafka(result)
    assert [m[1:] for m in messages] == expected


def test_deepflow_result_parser_reads_every_kafka_line():
    total = sum(len(deepflow_kafka(p.with_suffix(".result"))) for p in KAFKA if p.with_suffix(".result").exists())
    lines = sum(p.with_suffix(".result").read_text().count("KafkaInfo {") for p in KAFKA
                if p.with_suffix(".result").exists())
    assert total == lines == 24


_MONGO_INFO = re.compile(r'MongoDBInfo \{ msg_type: (\w+), .*?request_id: (-?\d+), response_id: (-?\d+), '
                         r'op_code: (\d+), op_code_name: "(\w+)".*?captured_request_byte: (\d+), '
                         r'captured_response_byte: (\d+)')

MONGO_OPCODES = {1: "OP_REPLY", 2004: "OP_QUERY", 2013: "OP_MSG", 2012: "OP_COMPRESSED", 2010: "OP_COMMAND",
                 2011: "OP_COMMANDREPLY", 2001: "OP_UPDATE", 2002: "OP_INSERT", 2005: "OP_GET_MORE",
                 2006: "OP_DELETE", 2007: "OP_KILL_CURSORS"}


@pytest.mark.parametrize("path", MONGO, ids=lambda p: p.name)
def test_mongo_capture_frames_split_little_endian(path):
    expected = []
    for line in path.with_suffix(".result").read_text().splitlines():
        if line.startswith("MongoDBInfo"):
            m = _MONGO_INFO.match(line)
            assert m, line[:120]
            msg_type, request_id, response_id, op, name, req_bytes, resp_bytes = m.groups()
            size = int(req_bytes) if msg_type == "Request" else int(resp_bytes)
            expected.append((msg_type, int(request_id), int(response_id), int(op), name, size))
    got = []
    for s in iter_tcp_streams(path, server_ports={27017, 3717}):
        splitters = [FrameSplitter(byteorder="little", size_includes_prefix=True) for _ in range(2)]
        for _frame, d, body in frames_in_capture_order(s, splitters):
            own_id, response_to, op = struct.unpack_from("<iii", body)
            assert op in MONGO_OPCODES
            if d == TO_SERVER:
                assert response_to == 0
                got.append(("Request", own_id, 0, op, MONGO_OPCODES[op], len(body) + 4))
            else:
                got.append(("Response", response_to, own_id, op, MONGO_OPCODES[op], len(body) + 4))
        assert splitters[0].buffered == splitters[1].buffered == 0
        assert not any(type(e) is Gap for d in (0, 1) for e in s.events[d])
    assert got == expected
    assert len(got) == {"mongo.pcap": 30, "mongo-msg.pcap": 2}[path.name]


def test_response_without_its_request_is_reported_unpaired(tmp_path):
    # The capture cut so that it starts after the request: the response cannot be decoded.
    src = DEEPFLOW / "kafka" / "00-produce-v2.pcap"
    cut = tmp_path / "no-request.pcap"
    with open(cut, "wb") as f:
        writer = None
        for p in read_packets(src):
            writer = writer or PcapWriter(f, p.linktype, snaplen=65535)
            if p.frame != 1:
                writer.write(p.ts_ns, p.data, p.orig_len)
    messages, unpaired = decode_kafka(cut, {9092})
    assert messages == [] and unpaired == [1]
