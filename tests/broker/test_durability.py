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
