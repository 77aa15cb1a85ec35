"""KafkaFlow: Kafka frames of one connection's stream events decoded into exchanges.

Streams are built with kwire's codec (requests, responses, record batches) and fed to the flow
as the Chunk / Gap / End events the TCP layer produces; the DeepFlow captures then go through
the whole analyzer and must agree with DeepFlow's expected output.
"""

from __future__ import annotations

import json
import struct
import uuid

import pytest

from kwire.analyze.analyzer import AnalyzeOptions, decode_captures
from kwire.analyze.exchange import (
    ANSWERED,
    NO_RESPONSE_EXPECTED,
    ORPHAN_RESPONSE,
    UNANSWERED,
    UNDECODABLE,
    FlowContext,
    PartitionInfo,
    WarningLog,
)
from kwire.analyze.kafka import KafkaFlow, exchange_json, looks_like_kafka_request
from kwire.analyze.tables import exchange_row, group_event_row
from kwire.analyze.tcp import TO_CLIENT, TO_SERVER, Chunk, Connection, End, Gap
from kwire.client.types import TopicPartition
from kwire.protocol import encode_request, encode_response, messages
from kwire.protocol.consumer_protocol import Assignment, encode_assignment
from kwire.protocol.records import Compression, LegacyMessageSetBuilder, RecordBatchBuilder

from .test_captures import KAFKA, deepflow_kafka

TS = 1_700_000_000_000_000_000


# -- building streams -------------------------------------------------------------------------


def request(name: str, version: int, cid: int, client_id: str | None = "app", **fields) -> bytes:
    return encode_request(messages.message_class(name + "Request").from_dict(fields), version, cid, client_id)


def response(name: str, version: int, cid: int, **fields) -> bytes:
    return encode_response(messages.message_class(name + "Response").from_dict(fields), version, cid)


def frame(payload: bytes) -> bytes:
    """A size-prefixed frame around raw bytes (SASL tokens, garbage)."""
    return struct.pack(">i", len(payload)) + payload


def batch(n: int, codec: int = Compression.NONE, *, value: bytes = b"v" * 100, base_offset: int = 0) -> bytes:
    b = RecordBatchBuilder(compression=codec, base_offset=base_offset)
    for i in range(n):
        b.append(b"key-%d" % i, value, 1_700_000_000_000 + i, headers=[("h", b"\xff\x01")])
    return b.build()


def produce(cid: int, records: bytes, *, acks: int = -1, version: int = 9, topic: str = "orders",
            partition: int = 3) -> bytes:
    return request("Produce", version, cid, acks=acks, timeout_ms=1500, topic_data=[
        {"name": topic, "partition_data": [{"index": partition, "records": records}]}])


def produce_response(cid: int, *, version: int = 9, base_offset: int = 100, error_code: int = 0,
                     topic: str = "orders", partition: int = 3) -> bytes:
    return response("Produce", version, cid, responses=[{"name": topic, "partition_responses": [
        {"index": partition, "error_code": error_code, "base_offset": base_offset}]}])


class Feeder:
    """Feeds a KafkaFlow the events of one connection; numbers frames as a capture would."""

    def __init__(self, *, captured_start: tuple[bool, bool] = (True, True), keep_messages: bool = False,
                 max_frame_size: int = 100 * 1024 * 1024):
        self.conn = Connection(7, b"\x0a\x00\x00\x01", 50000, b"\x0a\x00\x00\x02", 9092, "syn", 1, TS)
        for d, captured in zip((TO_SERVER, TO_CLIENT), captured_start, strict=True):
            self.conn.directions[d].isn = 1000 if captured else None
        self.log = WarningLog()
        self.ctx = FlowContext(capture="test.pcap", warn=self.log, keep_messages=keep_messages,
                               record_values=keep_messages, max_frame_size=max_frame_size)
        self.flow = KafkaFlow(self.conn, self.ctx)
        self.frame = 0
        self.out: list = []

    def send(self, direction: int, data: bytes, chunk: int | None = None) -> list:
        """The exchanges completed by ``data`` arriving in chunks of ``chunk`` bytes (one packet each)."""
        got = []
        step = chunk or max(len(data), 1)
        for i in range(0, len(data), step):
            self.frame += 1
            got += self.flow.feed(direction, Chunk(self.frame, TS + self.frame * 1000, data[i:i + step]))
        self.out += got
        return got

    def up(self, data: bytes, chunk: int | None = None) -> list:
        return self.send(TO_SERVER, data, chunk)

    def down(self, data: bytes, chunk: int | None = None) -> list:
        return self.send(TO_CLIENT, data, chunk)

    def gap(self, direction: int, size: int) -> list:
        self.frame += 1
        got = self.flow.feed(direction, Gap(self.frame, TS + self.frame * 1000, size))
        self.out += got
        return got

    def end(self, reason: str = "fin", first: int = TO_CLIENT) -> None:
        """Both directions end, ``first``'s first (the server closing, by default)."""
        self.frame += 1
        for d in (first, 1 - first):
            self.conn.directions[d].ended = reason
            self.out += self.flow.feed(d, End(self.frame, TS + self.frame * 1000, reason))

    def close(self) -> list:
        got = self.flow.close()
        self.out += got
        return got

    def kinds(self) -> list[str]:
        return [w.kind for w in self.log.kept]


def only(exchanges: list):
    assert len(exchanges) == 1, exchanges
    return exchanges[0]


# -- the sniffer --------------------------------------------------------------------------------


def test_sniffer_knows_request_headers_from_other_bytes():
    assert looks_like_kafka_request(request("ApiVersions", 3, 1, client_software_name="x",
                                            client_software_version="1")[:64])
    assert looks_like_kafka_request(produce(1, batch(1))[:16])
    assert looks_like_kafka_request(request("Metadata", 1, 1, client_id=None, topics=None)[:64])  # null client id
    assert not looks_like_kafka_request(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert not looks_like_kafka_request(struct.pack("<iiii", 60, 1, 0, 2013) + b"\0" * 44)  # a MongoDB OP_MSG
    assert not looks_like_kafka_request(struct.pack(">ihhih", 100, 200, 0, 1, 3) + b"app")  # unknown api key
    assert not looks_like_kafka_request(struct.pack(">ihhih", 100, 3, 90, 1, 3) + b"app")  # absurd version
    assert not looks_like_kafka_request(struct.pack(">ihhih", 100, 3, 1, 1, 500) + b"app")  # id longer than frame
    assert not looks_like_kafka_request(struct.pack(">ihhih", 100, 3, 1, 1, 3) + b"a\nb")  # id not text
    assert not looks_like_kafka_request(b"\0\0")


# -- produce and fetch --------------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
def test_produce_is_paired_and_counts_records_after_decompression(codec):
    f = Feeder()
    records = batch(25, codec) + batch(5, codec, base_offset=25)
    assert f.up(produce(11, records)) == []
    ex = only(f.down(produce_response(11, base_offset=4242)))
    assert (ex.api, ex.api_key, ex.api_version, ex.correlation_id, ex.status) == ("Produce", 0, 9, 11, ANSWERED)
    assert ex.client_id == "app" and ex.conn == 7 and ex.client == "10.0.0.1:50000"
    assert ex.partitions == [PartitionInfo("orders", 3, 0, 4242, 30, len(records))]
    assert ex.details["acks"] == -1 and ex.details["timeout_ms"] == 1500
    assert ex.details["codecs"] == [codec.name.lower()]
    # Uncompressed size: both batches as they would be stored without compression.
    plain = batch(25) + batch(5, base_offset=25)
    assert ex.details["uncompressed_bytes"] == len(plain)
    assert (ex.request_frame, ex.response_frame) == (1, 2)
    assert ex.request_bytes == len(produce(11, records)) and ex.response_bytes == len(produce_response(11))
    assert ex.latency_ns == 1000
    assert f.log.total == 0


def test_produce_v2_with_a_legacy_gzip_message_set():
    legacy = LegacyMessageSetBuilder(1, compression=Compression.GZIP)
    for i in range(7):
        legacy.append(b"k", b"value %d" % i, 1_700_000_000_000)
    f = Feeder()
    f.up(produce(1, legacy.build(), version=2))
    ex = only(f.down(produce_response(1, version=2, base_offset=9)))
    assert ex.partitions[0].records == 7 and ex.partitions[0].offset == 9
    assert ex.details["codecs"] == ["gzip"]


def test_a_corrupt_batch_is_reported_and_the_good_ones_counted():
    good = batch(4, Compression.LZ4)
    bad = bytearray(batch(6, Compression.ZSTD))
    bad[61:] = b"\xff" * (len(bad) - 61)  # the compressed payload destroyed, header intact
    f = Feeder()
    f.up(produce(1, good + bytes(bad)))
    ex = only(f.down(produce_response(1)))
    assert ex.status == ANSWERED and ex.partitions[0].records == 4
    assert "corrupt_records" in f.kinds()


def test_produce_with_acks_0_expects_no_response():
    f = Feeder()
    ex = only(f.up(produce(5, batch(3), acks=0)))
    assert ex.status == NO_RESPONSE_EXPECTED and ex.response_frame is None
    assert ex.partitions[0].records == 3 and ex.details["acks"] == 0
    # The next request is answered normally: nothing waits for the acks=0 one.
    f.up(request("Metadata", 12, 6, topics=None))
    ex = only(f.down(response("Metadata", 12, 6)))
    assert ex.api == "Metadata" and ex.status == ANSWERED
    assert f.close() == []


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
def test_fetch_fields_from_request_and_response(codec):
    f = Feeder()
    f.up(request("Fetch", 12, 3, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=1, topics=[
        {"topic": "orders", "partitions": [{"partition": 0, "fetch_offset": 120, "partition_max_bytes": 1 << 20},
                                           {"partition": 1, "fetch_offset": 7, "partition_max_bytes": 1 << 20}]}]))
    data = batch(12, codec, base_offset=120)
    ex = only(f.down(response("Fetch", 12, 3, throttle_time_ms=25, responses=[{"topic": "orders", "partitions": [
        {"partition_index": 0, "high_watermark": 200, "records": data},
        {"partition_index": 1, "error_code": 1, "high_watermark": -1, "records": None}]}])))
    assert ex.details["expected_wait_ms"] == 500
    assert ex.throttle_ms == 25
    assert ex.partitions == [PartitionInfo("orders", 0, 0, 120, 12, len(data), 200),
                             PartitionInfo("orders", 1, 1, 7, 0, 0, -1)]
    assert (ex.error_code, ex.error) == (1, "OFFSET_OUT_OF_RANGE")
    assert ex.errors == {"OFFSET_OUT_OF_RANGE": 1}


def test_fetch_by_topic_id_is_named_from_an_earlier_metadata_response():
    topic_id = uuid.UUID("6c5f0f3e-8d0a-4a4f-9d6b-2d6c1b1c0a11")
    other = uuid.UUID("00000000-0000-0000-0000-00000000beef")
    f = Feeder()
    f.up(request("Metadata", 12, 1, topics=None))
    f.down(response("Metadata", 12, 1, topics=[{"name": "payments", "topic_id": str(topic_id), "partitions": []}]))
    f.up(request("Fetch", 13, 2, max_wait_ms=100, topics=[
        {"topic_id": str(topic_id), "partitions": [{"partition": 0, "fetch_offset": 5}]},
        {"topic_id": str(other), "partitions": [{"partition": 2, "fetch_offset": 9}]}]))
    ex = only(f.down(response("Fetch", 13, 2, responses=[
        {"topic_id": str(topic_id), "partitions": [{"partition_index": 0, "high_watermark": 6,
                                                     "records": batch(1, base_offset=5)}]},
        {"topic_id": str(other), "partitions": [{"partition_index": 2, "high_watermark": 9}]}])))
    assert [(p.topic, p.partition, p.offset, p.records) for p in ex.partitions] == [
        ("payments", 0, 5, 1), (str(other), 2, 9, 0)]



def test_topic_ids_named_on_one_connection_name_fetches_on_another():
    # librdkafka reads Metadata on one connection and fetches on another: the ids a capture has
    # seen named anywhere name them everywhere in that capture.
    topic_id = uuid.UUID("6c5f0f3e-8d0a-4a4f-9d6b-2d6c1b1c0a11")
    metadata = Feeder()
    fetcher = Feeder()
    fetcher.ctx.topic_names = metadata.ctx.topic_names  # one capture: the driver shares one map
    fetcher.flow = KafkaFlow(fetcher.conn, fetcher.ctx)
    metadata.up(request("Metadata", 12, 1, topics=None))
    metadata.down(response("Metadata", 12, 1, topics=[{"name": "payments", "topic_id": str(topic_id),
                                                       "partitions": []}]))
    fetcher.up(request("Fetch", 13, 2, max_wait_ms=100, topics=[
        {"topic_id": str(topic_id), "partitions": [{"partition": 0, "fetch_offset": 5}]}]))
    ex = only(fetcher.down(response("Fetch", 13, 2, responses=[
        {"topic_id": str(topic_id), "partitions": [{"partition_index": 0, "high_watermark": 6}]}])))
    assert [(p.topic, p.partition) for p in ex.partitions] == [("payments", 0)]


# -- groups and commits -------------------------------------------------------------------------


def test_offset_commit_names_group_member_generation_and_partition_errors():
    f = Feeder()
    f.up(request("OffsetCommit", 8, 21, group_id="billing", generation_id_or_member_epoch=4, member_id="m-1",
                 topics=[{"name": "orders", "partitions": [
                     {"partition_index": 0, "committed_offset": 1000},
                     {"partition_index": 1, "committed_offset": 2000}]}]))
    ex = only(f.down(response("OffsetCommit", 8, 21, topics=[{"name": "orders", "partitions": [
        {"partition_index": 0, "error_code": 0}, {"partition_index": 1, "error_code": 22}]}])))
    assert (ex.group, ex.member_id, ex.generation) == ("billing", "m-1", 4)
    assert ex.partitions == [PartitionInfo("orders", 0, 0, 1000), PartitionInfo("orders", 1, 22, 2000)]
    assert (ex.error_code, ex.error) == (22, "ILLEGAL_GENERATION")


def test_offset_fetch_v8_uses_the_first_group_and_lists_all():
    f = Feeder()
    f.up(request("OffsetFetch", 8, 2, groups=[
        {"group_id": "a", "topics": [{"name": "t", "partition_indexes": [0, 1]}]},
        {"group_id": "b", "topics": None}]))
    ex = only(f.down(response("OffsetFetch", 8, 2, groups=[
        {"group_id": "a", "topics": [{"name": "t", "partitions": [
            {"partition_index": 0, "committed_offset": 55}, {"partition_index": 1, "committed_offset": -1}]}]},
        {"group_id": "b", "error_code": 16}])))
    assert ex.group == "a" and ex.details["groups"] == ["a", "b"]
    assert [(p.partition, p.offset) for p in ex.partitions] == [(0, 55), (1, -1)]
    assert ex.errors == {"NOT_COORDINATOR": 1}


def test_join_group_gives_member_id_generation_leader_and_wait():
    f = Feeder()
    f.up(request("JoinGroup", 7, 30, group_id="billing", session_timeout_ms=10000, rebalance_timeout_ms=60000,
                 member_id="", protocol_type="consumer", protocols=[{"name": "range", "metadata": b"\0\1"}]))
    ex = only(f.down(response("JoinGroup", 7, 30, generation_id=12, protocol_type="consumer",
                              protocol_name="range", leader="m-9", member_id="m-9",
                              members=[{"member_id": "m-9", "metadata": b"\0\1"}])))
    assert (ex.group, ex.member_id, ex.generation) == ("billing", "m-9", 12)
    assert ex.details["expected_wait_ms"] == 60000
    assert (ex.details["protocol_name"], ex.details["leader"]) == ("range", "m-9")
    row = group_event_row(ex)
    assert row["leader"] == "m-9" and row["generation"] == 12


def test_join_group_v0_waits_up_to_the_session_timeout():
    f = Feeder()
    f.up(request("JoinGroup", 0, 1, group_id="g", session_timeout_ms=30000, member_id="old",
                 protocol_type="consumer", protocols=[]))
    ex = only(f.down(response("JoinGroup", 0, 1, error_code=25, generation_id=-1, member_id="")))
    assert ex.details["expected_wait_ms"] == 30000 and ex.member_id == "old"
    assert ex.error == "UNKNOWN_MEMBER_ID"


def test_sync_group_assignment_is_decoded_with_the_consumer_protocol():
    assignment = encode_assignment(Assignment([TopicPartition("orders", 0), TopicPartition("orders", 2),
                                               TopicPartition("audit", 1)]))
    f = Feeder()
    f.up(request("SyncGroup", 5, 40, group_id="billing", generation_id=12, member_id="m-9",
                 protocol_type="consumer", protocol_name="range", assignments=[]))
    ex = only(f.down(response("SyncGroup", 5, 40, protocol_type="consumer", protocol_name="range",
                              assignment=assignment)))
    assert (ex.group, ex.member_id, ex.generation) == ("billing", "m-9", 12)
    assert sorted(ex.details["assignment"]) == [("audit", 1), ("orders", 0), ("orders", 2)]
    assert group_event_row(ex)["assignment"] == ["audit:1", "orders:0", "orders:2"]
    # Bytes that are not the consumer protocol: no assignment, no failure.
    f.up(request("SyncGroup", 5, 41, group_id="billing", generation_id=12, member_id="m-9", assignments=[]))
    ex = only(f.down(response("SyncGroup", 5, 41, assignment=b"\xff\xff\x00")))
    assert ex.status == ANSWERED and "assignment" not in ex.details


def test_heartbeat_leave_group_and_find_coordinator():
    f = Feeder()
    f.up(request("Heartbeat", 4, 1, group_id="g", generation_id=3, member_id="m"))
    hb = only(f.down(response("Heartbeat", 4, 1, error_code=27)))
    assert (hb.group, hb.generation, hb.member_id, hb.error) == ("g", 3, "m", "REBALANCE_IN_PROGRESS")
    f.up(request("LeaveGroup", 4, 2, group_id="g", members=[{"member_id": "m"}, {"member_id": "n"}]))
    leave = only(f.down(response("LeaveGroup", 4, 2, members=[{"member_id": "m"}, {"member_id": "n",
                                                                                     "error_code": 25}])))
    assert (leave.group, leave.member_id, leave.details["members"]) == ("g", "m", ["m", "n"])
    assert leave.error == "UNKNOWN_MEMBER_ID"
    f.up(request("FindCoordinator", 4, 3, key_type=0, coordinator_keys=["g"]))
    fc = only(f.down(response("FindCoordinator", 4, 3, coordinators=[{"key": "g", "node_id": 2}])))
    assert fc.group == "g" and fc.details["coordinator"] == 2


# -- handshakes ---------------------------------------------------------------------------------


def api_versions_v0_layout(cid: int, error_code: int) -> bytes:
    """What a broker sends a client whose ApiVersions version it refuses (KIP-511): the v0 layout."""
    return response("ApiVersions", 0, cid, error_code=error_code,
                    api_keys=[{"api_key": 18, "min_version": 0, "max_version": 3}])


def test_api_versions_refused_is_read_in_the_v0_layout():
    f = Feeder()
    f.up(request("ApiVersions", 4, 0, client_software_name="kwire", client_software_version="0.1"))
    ex = only(f.down(api_versions_v0_layout(0, 35)))
    assert ex.status == ANSWERED and (ex.error_code, ex.error) == (35, "UNSUPPORTED_VERSION")
    assert ex.warning is None and ex.details["client_software"] == "kwire 0.1"
    # The client retries at the version the broker offered.
    f.up(request("ApiVersions", 3, 1, client_software_name="kwire", client_software_version="0.1"))
    ex = only(f.down(response("ApiVersions", 3, 1, api_keys=[{"api_key": 0, "min_version": 0, "max_version": 9}])))
    assert ex.status == ANSWERED and ex.error is None
    assert f.log.total == 0


def test_api_versions_in_neither_layout_still_gives_its_error_code():
    f = Feeder()
    f.up(request("ApiVersions", 3, 0, client_software_name="x", client_software_version="1"))
    # librdkafka's mock cluster: the error code, then bytes matching no layout.
    ex = only(f.down(frame(struct.pack(">ih", 0, 35) + b"\x07\x07\x07")))
    assert (ex.error_code, ex.error) == (35, "UNSUPPORTED_VERSION")
    assert ex.warning and "undecodable" in f.kinds()


def sasl_v0_start(f: Feeder, mechanism: str) -> None:
    f.up(request("SaslHandshake", 0, 1, mechanism=mechanism))
    ex = only(f.down(response("SaslHandshake", 0, 1, mechanisms=["PLAIN", "SCRAM-SHA-256"])))
    assert ex.api == "SaslHandshake" and ex.details["mechanism"] == mechanism


def test_sasl_v0_plain_tokens_are_not_read_as_requests():
    f = Feeder()
    sasl_v0_start(f, "PLAIN")
    # "\0Alice\0..." starts with bytes 0x00 0x41: api key 65 (a real one) with version 0x6c69.
    assert f.up(frame(b"\0Alice\0secret")) == []
    token = only(f.down(frame(b"")))
    assert (token.api, token.api_key, token.api_version, token.status) == ("SaslToken", -1, -1, ANSWERED)
    assert token.details["mechanism"] == "PLAIN" and token.request_bytes == 17 and token.response_bytes == 4
    f.up(request("Metadata", 12, 2, topics=None))
    ex = only(f.down(response("Metadata", 12, 2)))
    assert ex.api == "Metadata" and ex.status == ANSWERED
    assert f.log.total == 0


def test_sasl_v0_scram_takes_two_round_trips():
    f = Feeder()
    sasl_v0_start(f, "SCRAM-SHA-256")
    tokens = []
    for client, server in ((b"n,,n=alice,r=rOprNGfwEbeRWgbNEkqO", b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF,"
                                                                   b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"),
                           (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMH",
                            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")):
        assert f.up(frame(client)) == []
        tokens.append(only(f.down(frame(server))))
    assert [t.api for t in tokens] == ["SaslToken", "SaslToken"]
    f.up(produce(2, batch(2)))
    ex = only(f.down(produce_response(2)))
    assert ex.api == "Produce" and ex.partitions[0].records == 2


def test_sasl_handshake_v1_uses_sasl_authenticate_frames():
    f = Feeder(keep_messages=True)
    f.up(request("SaslHandshake", 1, 1, mechanism="PLAIN"))
    f.down(response("SaslHandshake", 1, 1, mechanisms=["PLAIN"]))
    f.up(request("SaslAuthenticate", 2, 2, auth_bytes=b"\0alice\0secret"))
    ex = only(f.down(response("SaslAuthenticate", 2, 2, error_code=58, error_message="bad password")))
    assert (ex.api, ex.status, ex.error) == ("SaslAuthenticate", ANSWERED, "SASL_AUTHENTICATION_FAILED")
    text = json.dumps(exchange_json(ex, True))
    assert "secret" not in text and b"secret".hex() not in text


def test_a_failed_sasl_v0_handshake_keeps_kafka_framing():
    f = Feeder()
    f.up(request("SaslHandshake", 0, 1, mechanism="GSSAPI"))
    f.down(response("SaslHandshake", 0, 1, error_code=33, mechanisms=["PLAIN"]))
    f.up(request("Metadata", 1, 2, topics=None))
    assert only(f.down(response("Metadata", 1, 2))).api == "Metadata"


# -- damaged streams ----------------------------------------------------------------------------


def test_a_gap_in_the_client_stream_resynchronises_on_the_next_request():
    f = Feeder()
    first, second, third = produce(1, batch(2)), produce(2, batch(40)), produce(3, batch(4))
    f.up(first)
    f.down(produce_response(1))
    f.up(second[:500])
    f.gap(TO_SERVER, 300)
    f.up(second[800:] + third[:30])  # the tail of the lost request, then the start of the next
    f.up(third[30:])
    f.down(produce_response(2) + produce_response(3))
    f.close()
    # The response to the lost request came, but with no request to pair it with.
    assert [(e.correlation_id, e.status) for e in f.out] == [(1, ANSWERED), (2, ORPHAN_RESPONSE), (3, ANSWERED)]
    assert f.out[2].partitions[0].records == 4
    assert f.kinds() == ["gap", "resync"]
    gap, resync = f.log.kept
    assert gap.frame == 4 and "300 bytes missing" in gap.message
    assert f"{len(second) - 800} bytes skipped" in resync.message


def test_a_gap_in_the_server_stream_leaves_the_lost_response_unanswered():
    f = Feeder()
    f.up(request("Metadata", 12, 1, topics=None) + request("Metadata", 12, 2, topics=None))
    lost = response("Metadata", 12, 1, brokers=[{"node_id": 1, "host": "broker-1", "port": 9092}])
    f.down(lost[:10])
    f.gap(TO_CLIENT, len(lost) - 20)
    f.down(lost[-10:] + response("Metadata", 12, 2))
    assert [(e.correlation_id, e.status, e.details.get("unanswered_by")) for e in f.out] == [
        (1, UNANSWERED, "skipped"), (2, ANSWERED, None)]
    assert f.kinds() == ["gap", "resync"]


def test_a_capture_started_mid_conversation_skips_to_the_first_whole_frame():
    head = produce(1, batch(30))
    f = Feeder(captured_start=(False, False))
    f.up(head[200:] + produce(2, batch(1)))  # the end of a request whose start was not captured
    # The server's side was captured from a frame start: the first response is an orphan.
    f.down(produce_response(1) + produce_response(2))
    assert [(e.correlation_id, e.status) for e in f.out] == [(1, ORPHAN_RESPONSE), (2, ANSWERED)]
    assert f.kinds() == ["resync"]
    assert f"{len(head) - 200} bytes skipped" in f.log.kept[0].message


def test_frames_larger_than_the_scan_window_are_taken_on_strong_evidence():
    big = batch(1, value=b"x" * (1536 * 1024))  # more than the 1 MiB the scan holds
    f = Feeder()
    f.up(request("Metadata", 12, 1, topics=None))  # the client id ("app") is now known
    f.down(response("Metadata", 12, 1))
    lost = request("Metadata", 12, 2, topics=[{"name": f"topic-{i}"} for i in range(20)])
    f.up(lost[:20])
    f.gap(TO_SERVER, 5)
    f.up(lost[25:] + produce(3, big), 1448)  # its header carries the connection's client id
    fetched = response("Fetch", 12, 4, responses=[{"topic": "orders", "partitions": [
        {"partition_index": 3, "high_watermark": 1, "records": big}]}])
    f.up(request("Fetch", 12, 4, max_wait_ms=0, topics=[]))
    f.down(produce_response(3) + fetched[:9])
    f.gap(TO_CLIENT, 3)
    f.down(fetched[12:] + fetched, 1448)  # the rest of a copy lost in part, then one that answers the oldest request
    assert [(e.correlation_id, e.status) for e in f.out] == [(1, ANSWERED), (3, ANSWERED), (4, ANSWERED)]
    assert f.out[1].partitions[0].records == 1 and f.out[2].partitions[0].records == 1
    assert f.kinds() == ["gap", "resync", "gap", "resync"]


def test_number_arrays_after_a_gap_do_not_swallow_the_stream():
    # Big-endian counters hold headers that look valid (sizes, known api keys and versions):
    # without a whole frame that decodes, none of them may take the stream.
    counters = b"".join(struct.pack(">i", i) for i in range(400_000, 700_000))
    f = Feeder(captured_start=(False, False))
    f.up(counters, 1448)
    f.up(request("Metadata", 12, 2, topics=None))
    f.down(bytes(4096) + response("Metadata", 12, 2))
    assert [(e.correlation_id, e.status) for e in f.out] == [(2, ANSWERED)]
    assert f.kinds() == ["resync", "resync"]
    assert f"{len(counters)} bytes skipped" in f.log.kept[0].message


def test_a_server_stream_captured_from_a_frame_start_reports_orphans():
    f = Feeder(captured_start=(False, False))
    ex = only(f.down(response("Metadata", 12, 77)))
    assert (ex.status, ex.correlation_id, ex.response_bytes, ex.request_frame) == (
        ORPHAN_RESPONSE, 77, len(response("Metadata", 12, 77)), None)
    assert f.log.total == 0


def test_a_forged_length_is_reported_and_the_stream_resynchronised():
    f = Feeder(max_frame_size=1 << 20)
    forged = struct.pack(">ihhi", 0x7FFFFFF0, 0, 9, 2) + b"\0" * 40
    f.up(produce(1, batch(1)) + forged + produce(3, batch(2)))
    f.down(produce_response(1) + produce_response(3))
    assert [(e.correlation_id, e.status) for e in f.out] == [(1, ANSWERED), (3, ANSWERED)]
    assert f.kinds() == ["forged_length", "resync"]
    assert "over the maximum" in f.log.kept[0].message
    f.up(b"\xff\xff\xff\xf0" + b"\0" * 8)  # a negative size
    assert f.kinds()[-1] == "forged_length"


def test_garbage_that_frames_but_does_not_decode():
    f = Feeder()
    garbage = frame(struct.pack(">hhi", 3, 12, 9) + b"\x00\x03app\x00" + b"\xee" * 20)
    bad = only(f.up(garbage + frame(b"\x01")))  # the second is too short for a header at all
    assert (bad.status, bad.api) == (UNDECODABLE, "Unknown")
    f.up(request("Metadata", 12, 10, topics=None))
    out = f.down(response("Metadata", 12, 9) + response("Metadata", 12, 10))
    assert [(e.api, e.correlation_id, e.status) for e in out] == [("Metadata", 9, UNDECODABLE),
                                                                  ("Metadata", 10, ANSWERED)]
    assert out[0].response_frame is not None and out[0].warning
    assert f.kinds() == ["undecodable", "undecodable"]


def test_unknown_api_key_and_version_are_undecodable_but_paired():
    f = Feeder()
    f.up(struct.pack(">ihhih", 14, 250, 0, 1, 3) + b"app" + b"\0")
    f.up(struct.pack(">ihhih", 14, 0, 99, 2, 3) + b"app" + b"\0")
    out = f.down(frame(struct.pack(">ih", 1, 35)) + frame(struct.pack(">ih", 2, 35)))
    assert [(e.api, e.api_version, e.status) for e in out] == [("ApiKey(250)", 0, UNDECODABLE),
                                                               ("Produce", 99, UNDECODABLE)]
    assert "Produce v99" in out[1].warning and out[0].response_bytes == 10
    assert f.kinds() == ["unknown_api", "unknown_api"]


def test_orphan_response_and_skipped_requests():
    f = Feeder()
    f.up(request("Metadata", 12, 1, topics=None) + request("Metadata", 12, 2, topics=None))
    out = f.down(response("Metadata", 12, 99) + response("Metadata", 12, 2))
    assert [(e.correlation_id, e.status, e.details.get("unanswered_by")) for e in out] == [
        (99, ORPHAN_RESPONSE, None), (1, UNANSWERED, "skipped"), (2, ANSWERED, None)]
    assert out[0].api == "Unknown" and out[0].response_bytes == len(response("Metadata", 12, 99))


@pytest.mark.parametrize(("reason", "first", "expected"), [
    ("fin", TO_CLIENT, "connection_end"), ("rst", TO_CLIENT, "connection_end"),
    ("fin", TO_SERVER, "client_close"), ("rst", TO_SERVER, "client_close"),
    ("eof", TO_SERVER, "capture_end"), (None, None, "capture_end")])
def test_requests_in_flight_at_close(reason, first, expected):
    """The side that ended first decides: the client closing with a long-poll Fetch in flight gave
    it up itself; the server closing (or resetting) left it unanswered."""
    f = Feeder()
    f.up(request("Fetch", 12, 1, max_wait_ms=500, topics=[]) + produce(2, batch(1))[:40])
    if reason:
        f.end(reason, first)
    ex = only(f.close())
    assert (ex.status, ex.details["unanswered_by"], ex.api) == (UNANSWERED, expected, "Fetch")
    assert f.kinds() == ["truncated"]
    assert f.flow.close() == []


def test_responses_never_captured_do_not_pile_up():
    f = Feeder()
    for cid in range(1100):
        f.up(request("Heartbeat", 4, cid, group_id="g", generation_id=1, member_id="m"))
    assert len(f.out) == 1100 - 1024
    assert all(e.details["unanswered_by"] == "skipped" for e in f.out)
    assert f.kinds() == ["in_flight"]
    assert len(f.close()) == 1024


# -- chunking -----------------------------------------------------------------------------------


def conversation() -> list[tuple[int, bytes]]:
    """A small conversation touching every special path of the flow: (direction, bytes)."""
    return [
        (TO_SERVER, request("ApiVersions", 3, 0, client_software_name="kwire", client_software_version="1")),
        (TO_CLIENT, api_versions_v0_layout(0, 35)),
        (TO_SERVER, request("SaslHandshake", 0, 1, mechanism="PLAIN")),
        (TO_CLIENT, response("SaslHandshake", 0, 1, mechanisms=["PLAIN"])),
        (TO_SERVER, frame(b"\0alice\0secret")),
        (TO_CLIENT, frame(b"")),
        (TO_SERVER, produce(2, batch(3, Compression.LZ4))),
        (TO_CLIENT, produce_response(2)),
        (TO_SERVER, produce(3, batch(1), acks=0)),
        (TO_SERVER, request("Fetch", 12, 4, max_wait_ms=100, topics=[
            {"topic": "orders", "partitions": [{"partition": 3, "fetch_offset": 100}]}])),
        (TO_CLIENT, response("Fetch", 12, 4, responses=[{"topic": "orders", "partitions": [
            {"partition_index": 3, "high_watermark": 104, "records": batch(4, Compression.ZSTD, base_offset=100)}]}])),
        (TO_SERVER, request("Heartbeat", 4, 5, group_id="g", generation_id=1, member_id="m")),
    ]


def comparable(exchanges) -> list[dict]:
    rows = []
    for e in exchanges:
        row = exchange_row(e)
        for k in ("request_frame", "request_ts_ns", "response_frame", "response_ts_ns", "latency_ms"):
            del row[k]
        rows.append((row, e.details, e.partitions))
    return rows


@pytest.mark.parametrize("chunk", [1, 2, 5, 13, 1448])
def test_any_chunking_gives_the_same_exchanges(chunk):
    whole, cut = Feeder(), Feeder()
    for direction, data in conversation():
        whole.send(direction, data)
        cut.send(direction, data, chunk)
    whole.close()
    cut.close()
    assert len(whole.out) == 7 and whole.log.total == 0
    assert comparable(cut.out) == comparable(whole.out)
    assert cut.log.total == 0


def test_resynchronising_works_one_byte_at_a_time():
    def run(chunk):
        f = Feeder(captured_start=(False, True))
        f.up(produce(1, batch(20))[100:], chunk)  # a request's tail: its start was not captured
        f.up(produce(2, batch(2)), chunk)
        f.down(produce_response(2), chunk)
        f.up(produce(3, batch(2))[:50], chunk)
        f.gap(TO_SERVER, 10)
        f.up(produce(3, batch(2))[60:] + produce(4, batch(3)), chunk)
        f.down(produce_response(3) + produce_response(4), chunk)
        f.close()
        return f

    whole, cut = run(None), run(1)
    assert [(e.correlation_id, e.status) for e in whole.out] == [(2, ANSWERED), (3, ORPHAN_RESPONSE), (4, ANSWERED)]
    assert comparable(cut.out) == comparable(whole.out)
    assert whole.kinds() == cut.kinds() == ["resync", "gap", "resync"]


# -- --json -------------------------------------------------------------------------------------


def test_exchange_json_has_the_row_the_bodies_and_the_records():
    f = Feeder(keep_messages=True)
    f.up(produce(8, batch(2, Compression.SNAPPY, value=b"hello") + batch(1, value=b"\xff\xfe")))
    ex = only(f.down(produce_response(8, base_offset=50)))
    doc = json.loads(json.dumps(exchange_json(ex, record_values=True)))
    assert doc["api"] == "Produce" and doc["correlation_id"] == 8 and doc["records"] == 3
    assert doc["details"]["codecs"] == ["none", "snappy"]
    part = doc["request"]["topic_data"][0]["partition_data"][0]
    first, second = part["records"]
    assert (first["codec"], first["records"], second["codec"]) == ("snappy", 2, "none")
    assert first["uncompressed_bytes"] == len(batch(2, value=b"hello"))
    assert first["values"][1] == {"offset": 1, "timestamp": 1_700_000_000_001, "key": "key-1", "value": "hello",
                                  "headers": [["h", "ff01"]]}
    assert second["values"][0]["value"] == "fffe"  # not UTF-8: hex
    assert doc["response"]["responses"][0]["partition_responses"][0]["base_offset"] == 50
    without_values = exchange_json(ex, record_values=False)
    assert "values" not in without_values["request"]["topic_data"][0]["partition_data"][0]["records"][0]


def test_exchange_json_without_kept_messages_has_null_bodies():
    f = Feeder()
    f.up(request("Metadata", 12, 1, topics=None))
    doc = exchange_json(only(f.down(response("Metadata", 12, 1))), record_values=True)
    assert doc["request"] is None and doc["response"] is None and doc["api"] == "Metadata"


# -- real captures ------------------------------------------------------------------------------


def test_deepflow_captures_agree_with_deepflow():
    # 36333: the broker port of DeepFlow's test cluster; some captures have no SYN and put the
    # broker on the higher port, so it is named rather than guessed.
    exchanges, decoder = decode_captures(KAFKA, AnalyzeOptions(kafka_ports=frozenset({9092, 36333})))
    assert decoder.warnings.total == 0, decoder.warnings.kept
    assert all(e.status == ANSWERED for e in exchanges)
    compared = 0
    for path in KAFKA:
        mine = [e for e in exchanges if e.capture == path.name]
        messages = []
        for e in mine:
            messages.append((e.request_frame, "Request", e.correlation_id, e.api, e.api_version, e.client_id or "",
                             e.request_bytes - 4))
            messages.append((e.response_frame, "Response", e.correlation_id, e.api, e.api_version, "",
                             e.response_bytes - 4))
        messages.sort()
        result = path.with_suffix(".result")
        if not result.exists():  # 01-fetch-v12-perf: no expected output, decoding is the test
            assert [e.api for e in mine] == ["Fetch"]
            continue
        assert [m[1:] for m in messages] == deepflow_kafka(result), path.name
        compared += 1
    assert compared == len(KAFKA) - 1


def test_deepflow_group_captures_give_group_fields():
    exchanges, _ = decode_captures([p for p in KAFKA if p.name.startswith(("11-", "14-", "mixed"))],
                                   AnalyzeOptions(kafka_ports=frozenset({9092, 36333})))
    by_api = {e.api: e for e in exchanges}
    assert by_api["SyncGroup"].group == "zzzz12" and by_api["SyncGroup"].error_code == -1
    assert by_api["JoinGroup"].group and by_api["JoinGroup"].details["expected_wait_ms"] > 0
    commit = by_api["OffsetCommit"]
    assert commit.group and commit.partitions and commit.generation is not None
