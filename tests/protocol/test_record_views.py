"""``record_views``: ``records`` fields decoded as views into the input instead of copies."""

from __future__ import annotations

import pytest

from kwire.protocol import decode_request_header, encode_request, messages
from kwire.protocol.records import RecordBatchBuilder

R = messages.ProduceRequest


def _produce(records: bytes) -> messages.ProduceRequest:
    return R(acks=1, timeout_ms=1000, topic_data=[R.TopicProduceData(name="t", partition_data=[
        R.TopicProduceData.PartitionProduceData(index=0, records=records),
        R.TopicProduceData.PartitionProduceData(index=1, records=None)])])


@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_records_are_writable_views_into_a_bytearray(version):
    builder = RecordBatchBuilder()
    builder.append(b"k", b"v", 1)
    records = bytes(builder.build())
    frame = bytearray(encode_request(_produce(records), version, correlation_id=1)[4:])
    _, offset = decode_request_header(frame)
    request, end = R.codec(version).decode(frame, offset, record_views=True)
    assert end == len(frame)
    view = request.topic_data[0].partition_data[0].records
    assert isinstance(view, memoryview) and view == records and not view.readonly
    assert view.obj is frame  # no copy
    assert request.topic_data[0].partition_data[1].records is None
    view[0] = 0x7F  # writes land in the frame
    assert frame.find(b"\x7f" + records[1:]) > 0
    # Equal to the copying decode, and encodes the same.
    assert request.encode(version) == bytes(frame[offset:])


def test_views_of_bytes_are_read_only_and_copies_stay_the_default():
    body = _produce(b"\x01\x02\x03").encode(9)
    viewed = R.decode(body, 9, record_views=True)
    assert viewed.topic_data[0].partition_data[0].records.readonly
    plain = R.decode(bytearray(body), 9)
    assert type(plain.topic_data[0].partition_data[0].records) is bytes
    assert plain == viewed


def test_messages_without_records_share_the_plain_decoder():
    codec = messages.MetadataRequest.codec(12)
    assert codec._decoder(record_views=True) is codec.decode_from
    fetch = messages.FetchResponse.codec(16)
    assert fetch._decoder(record_views=True) is not fetch.decode_from
    # bytes fields are never views (handlers may keep them, and with them the whole frame).
    join = messages.JoinGroupRequest(group_id="g", session_timeout_ms=1, member_id="", protocol_type="consumer",
                                     protocols=[messages.JoinGroupRequest.JoinGroupRequestProtocol(
                                         name="range", metadata=b"meta")])
    decoded = messages.JoinGroupRequest.decode(bytearray(join.encode(9)), 9, record_views=True)
    assert type(decoded.protocols[0].metadata) is bytes
