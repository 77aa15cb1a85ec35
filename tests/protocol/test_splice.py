"""Zero-copy records: a SplicedBytes value in a records field is left out of the encoded bytes
and sent around; the pieces together are exactly the frame encode_response makes."""

from __future__ import annotations

import pytest

from kwire.protocol import SplicedBytes, encode_response, encode_response_parts, messages
from kwire.protocol.frames import decode_response
from kwire.protocol.records import RecordBatchBuilder


class _Held(SplicedBytes):
    def __init__(self, data: bytes):
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def read(self) -> bytes:
        return self.data


def _batch(n: int) -> bytes:
    b = RecordBatchBuilder()
    for i in range(n):
        b.append(b"k%d" % i, b"v" * i)
    return bytes(b.build())


def _fetch_response(records_a, records_b):
    R = messages.FetchResponse
    T, P = R.FetchableTopicResponse, R.FetchableTopicResponse.PartitionData
    parts = [P(partition_index=0, high_watermark=3, records=records_a),
             P(partition_index=1, high_watermark=5, records=records_b)]
    return R(responses=[T(topic="t", partitions=parts)])


def _join(parts) -> bytes:
    return b"".join(p.read() if isinstance(p, SplicedBytes) else p for p in parts)


@pytest.mark.parametrize("version", [0, 4, 11, 12, 16])
def test_parts_equal_the_copied_frame(version):
    a, b = _batch(3), _batch(5)
    whole = encode_response(_fetch_response(a, b), version, 77)
    parts = encode_response_parts(_fetch_response(_Held(a), _Held(b)), version, 77)
    kinds = [type(p) for p in parts]
    # Before v12 the records are the response's last bytes; flexible versions end with tag sections.
    assert kinds == [bytes, _Held, bytes, _Held] + ([bytes] if version >= 12 else [])
    assert all(p for p in parts if isinstance(p, bytes))
    assert _join(parts) == whole
    _, decoded = decode_response(whole[4:], 1, version)
    assert decoded.responses[0].partitions[1].records == b


def test_plain_encode_reads_spliced_values_in():
    a = _batch(2)
    resp = _fetch_response(_Held(a), None)
    assert resp.encode(12) == _fetch_response(a, None).encode(12)


def test_without_splices_one_piece():
    resp = _fetch_response(_batch(1), b"")
    assert encode_response_parts(resp, 12, 1) == [encode_response(resp, 12, 1)]


# -- a client's Produce request in pieces (gather-written with socket.sendmsg) -------------------
def _produce_request(records_a, records_b):
    R = messages.ProduceRequest
    T, P = R.TopicProduceData, R.TopicProduceData.PartitionProduceData
    return R(acks=-1, timeout_ms=30_000, topic_data=[
        T(name="t", partition_data=[P(index=0, records=records_a), P(index=1, records=records_b)])])


@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_request_parts_hold_the_large_batches_themselves_and_equal_the_copied_frame(version):
    from kwire.protocol.frames import encode_request, encode_request_parts

    large, small = _batch(400), _batch(2)
    assert len(large) >= 4096 > len(small)
    request = _produce_request(large, small)
    parts = encode_request_parts(request, version, 9, "me")
    assert b"".join(parts) == encode_request(request, version, 9, "me")
    # The large batch is the caller's own object, not a copy; the small one was copied in.
    assert sum(p is large for p in parts) == 1 and not any(p is small for p in parts)
    assert [type(p) for p in parts] == [bytes, bytes, bytes]
    # Without a large value: one piece, as encode_request's frame.
    assert encode_request_parts(_produce_request(small, small), version, 9) == \
        [encode_request(_produce_request(small, small), version, 9)]
