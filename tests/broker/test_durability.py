"""``fsync = "always"``: acks=all is answered only once the data is on disk, concurrent producers
share fsyncs (group commit), and acks=1 appends are flushed too without waiting for it."""

from __future__ import annotations

import asyncio

from kwire.broker.config import load_config
from kwire.broker.dispatch import PendingReply, Reply, dispatch
from kwire.broker.state import BrokerState
from kwire.protocol import encode_request, messages

from .test_handlers import batch, create


def _produce_frame(topic: str, partition: int, acks: int, correlation_id: int) -> bytes:
    R = messages.ProduceRequest
    req = R(acks=acks, timeout_ms=1000, topic_data=[R.TopicProduceData(name=topic, partition_data=[
        R.TopicProduceData.PartitionProduceData(index=partition, records=batch(3))])])
    return encode_request(req, 9, correlation_id)[4:]


def test_acks_all_waits_for_fsync_and_producers_share_them(tmp_path):
    state = BrokerState(load_config(None, data_dir=tmp_path / "d", fsync="always"))
    try:
        create(state, "dur", 4)
        logs = [state.logs.get("dur", p) for p in range(4)]

        async def scenario():
            pending = [dispatch(state, _produce_frame("dur", i % 4, -1, i), client_host="x", connection_id=i)
                       for i in range(40)]
            # Every append is in the log at once, but nothing is answered before an fsync covers it.
            assert all(isinstance(p, PendingReply) for p in pending)
            assert all(log.log_end_offset == 30 for log in logs)
            assert all(log.recovery_point == 0 for log in logs)
            replies = []
            for p in pending:
                replies.append(await p)
                assert all(log.recovery_point == log.log_end_offset for log in logs)
            return replies

        replies = asyncio.run(scenario())
        assert len(replies) == 40 and all(r is not None for r in replies)
        # 40 acks=all requests arrived together: far fewer fsync rounds than requests.
        assert 1 <= state.durability.flushes < 10
    finally:
        state.close()


def test_acks_one_is_answered_at_once_and_flushed_soon(tmp_path):
    state = BrokerState(load_config(None, data_dir=tmp_path / "d", fsync="always"))
    try:
        create(state, "one", 1)
        log = state.logs.get("one", 0)

        async def scenario():
            reply = dispatch(state, _produce_frame("one", 0, 1, 1), client_host="x", connection_id=1)
            assert isinstance(reply, Reply)  # answered without waiting for the disk
            for _ in range(200):
                if log.recovery_point == log.log_end_offset == 3:
                    return True
                await asyncio.sleep(0.01)
            return False

        assert asyncio.run(scenario())
    finally:
        state.close()


def test_fsync_never_does_not_flush(tmp_path):
    state = BrokerState(load_config(None, data_dir=tmp_path / "d", fsync="never"))
    try:
        create(state, "lazy", 1)

        async def scenario():
            reply = dispatch(state, _produce_frame("lazy", 0, -1, 1), client_host="x", connection_id=1)
            assert isinstance(reply, Reply)
            await asyncio.sleep(0.05)

        asyncio.run(scenario())
        assert state.durability.flushes == 0 and state.logs.get("lazy", 0).recovery_point == 0
    finally:
        state.close()


def test_a_topic_deleted_while_its_records_wait_for_the_disk(tmp_path):
    # DeleteTopics closes the partition's log while an acks=all produce waits for its group
    # commit: that produce is answered UNKNOWN_TOPIC_OR_PARTITION, and a produce to another
    # topic in the same round is flushed and acknowledged as usual (it used to fail both, and
    # close both connections, on the deleted log's "closed" error).
    from kwire.protocol.errors import UnknownTopicOrPartitionError
    from kwire.protocol.frames import decode_response

    from .conftest import serve

    state = BrokerState(load_config(None, data_dir=tmp_path / "d", fsync="always"))
    try:
        create(state, "doomed", 1)
        create(state, "kept", 1)
        kept = state.logs.get("kept", 0)

        async def scenario():
            pending = [dispatch(state, _produce_frame(t, 0, -1, i), client_host="x", connection_id=i)
                       for i, t in enumerate(["doomed", "kept"])]
            assert all(isinstance(p, PendingReply) for p in pending)
            R = messages.DeleteTopicsRequest
            assert serve(state, R(topic_names=["doomed"], timeout_ms=1000), 5).responses[0].error_code == 0
            return [await p for p in pending]

        answers = []
        for reply in asyncio.run(scenario()):
            assert isinstance(reply, Reply)
            _, response = decode_response(b"".join(reply.parts)[4:], reply.api_key, reply.api_version)
            answers.append(response.responses[0].partition_responses[0])
        doomed, ok = answers
        assert (doomed.error_code, doomed.base_offset) == (UnknownTopicOrPartitionError.code, -1)
        assert "deleted before its records were on disk" in doomed.error_message
        assert (ok.error_code, ok.base_offset) == (0, 0)
        assert kept.recovery_point == kept.log_end_offset == 3
    finally:
        state.close()
