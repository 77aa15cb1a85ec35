"""Produce through dispatch stores the batches from the request frame itself: the records are
decoded as views into the frame, the offsets are written there, and that is what the log holds."""

from __future__ import annotations

from kwire.broker.dispatch import Reply, dispatch
from kwire.protocol import encode_request, messages
from kwire.protocol.records import RecordBatch

from .test_handlers import batch, create, produce


def test_the_request_frame_is_what_gets_stored(state):
    create(state, "p", 1)
    produce(state, "p", 0, batch(2))  # offsets 0-1
    records = batch(3, start=2)
    R = messages.ProduceRequest
    req = R(acks=1, timeout_ms=1000, topic_data=[R.TopicProduceData(name="p", partition_data=[
        R.TopicProduceData.PartitionProduceData(index=0, records=records)])])
    frame = bytearray(encode_request(req, 9, 1)[4:])  # what the network layer hands over
    assert isinstance(dispatch(state, frame, client_host="x", connection_id=1), Reply)
    at = frame.find(records[16:]) - 16  # from the magic byte on, a CreateTime batch is left as sent
    in_frame = RecordBatch(frame, at)
    assert (in_frame.base_offset, in_frame.partition_leader_epoch) == (2, 0)  # stamped in the frame
    stored = b"".join(s.read() for s in state.logs.get("p", 0).read(2, 1 << 20))
    assert stored == bytes(frame[at:at + len(records)])


def test_a_bytes_frame_is_served_as_before(state):
    create(state, "p", 1)
    assert produce(state, "p", 0, batch(2)).base_offset == 0  # serve() dispatches bytes: copied, not modified
    assert produce(state, "p", 0, batch(1)).base_offset == 2
