"""The idempotent producer's sequence bookkeeping on its own (no network: it is plain state): what
goes out when, what a failure does to the numbering, and when the epoch is bumped."""

from __future__ import annotations

import collections

from kwire.client.accumulator import ProducerBatch, RecordAccumulator
from kwire.client.idempotence import IdempotenceState, wire_sequence
from kwire.client.types import TopicPartition
from kwire.protocol.records import RecordBatch

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)


def batch(tp: TopicPartition = TP, records: int = 2, created: float = 0.0) -> ProducerBatch:
    b = ProducerBatch(tp, created, created + 100)
    for i in range(records):
        b.add(None, b"v%d" % i, 1000 + i, None, None)
    return b


def state() -> IdempotenceState:
    s = IdempotenceState()
    s.set_producer_id(7, 0)
    return s


def test_batches_are_numbered_when_sent_and_continue_the_partitions_sequence():
    s = state()
    a, b, c = batch(records=3), batch(records=2), batch(OTHER, records=4)
    for x in (a, b, c):
        assert s.may_send(x)
        s.stamp(x)
    assert [(x.producer_id, x.epoch, x.sequence) for x in (a, b, c)] == [(7, 0, 0), (7, 0, 3), (7, 0, 0)]
    header = RecordBatch(b.encode(0, 2))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 0, 3)


def test_a_retry_goes_out_only_as_the_partitions_oldest_unfinished_batch():
    s = state()
    a, b = batch(), batch()
    s.stamp(a)
    s.stamp(b)
    assert not s.may_send(b)  # b waits while a (sequence 0) is unfinished
    assert s.may_send(a)
    s.acked(a)
    assert s.may_send(b)


def test_resent_batches_keep_their_bytes_and_sequence():
    s = state()
    a = batch()
    s.stamp(a)
    first = a.encode(0, 2)
    assert a.encode(0, 2) is first  # a resend is the very same batch


def test_the_last_batch_failing_for_good_hands_its_sequences_out_again():
    s = state()
    a, b = batch(), batch()
    s.stamp(a)
    s.acked(a)
    s.stamp(b)
    s.failed(b, maybe_written=False)
    c = batch()
    s.stamp(c)
    assert c.sequence == 2 and s.epoch == 0


def test_a_gap_behind_unfinished_batches_renumbers_them_under_a_new_epoch():
    s = state()
    a, b, c = batch(), batch(), batch(records=3)
    for x in (a, b, c):
        s.stamp(x)
    s.failed(a, maybe_written=False)        # refused for good: b and c now follow a gap
    assert not s.may_send(b)
    assert s.settle(TP, in_flight=1) == []  # something still out: wait
    renumbered = s.settle(TP, in_flight=0)
    assert renumbered == [b, c]
    assert (s.epoch, b.epoch, b.sequence, c.sequence) == (1, 1, 0, 2)
    assert b.data is None  # its bytes are rebuilt with the new header
    assert s.may_send(b)


def test_an_expired_batch_that_may_have_been_written_is_resolved_by_later_acks():
    s = state()
    a, b = batch(), batch()
    s.stamp(a)
    s.stamp(b)
    s.failed(a, maybe_written=True)   # expired after a send with no answer
    assert not s.may_send(b)
    s.acked(b)                         # the broker took sequence 2-3, so 0-1 were written
    assert s.settle(TP, in_flight=0) == [] and s.epoch == 0
    c = batch()
    assert s.may_send(c)
    s.stamp(c)
    assert c.sequence == 4


def test_an_expired_batch_nothing_confirms_bumps_the_epoch():
    s = state()
    a, b = batch(), batch()
    s.stamp(a)
    s.stamp(b)
    s.failed(a, maybe_written=True)
    assert s.settle(TP, in_flight=0) == [b]
    assert (s.epoch, b.sequence) == (1, 0)


def test_other_partitions_move_to_a_new_epoch_once_their_old_batches_finish():
    s = state()
    a = batch(TP)
    old = batch(OTHER)
    s.stamp(a)
    s.stamp(old)
    s.request_reset(TP, "test")
    s.settle(TP, in_flight=0)
    assert s.epoch == 1
    new = batch(OTHER)
    assert not s.may_send(new)         # OTHER still has a batch of epoch 0 unfinished
    assert s.may_send(old)             # which goes on under its epoch
    s.acked(old)
    assert s.may_send(new)
    s.stamp(new)
    assert (new.epoch, new.sequence) == (1, 0)


def test_an_exhausted_epoch_needs_a_new_producer_id_before_renumbering():
    s = IdempotenceState()
    s.set_producer_id(7, 32766)
    a = batch()
    s.stamp(a)
    s.request_reset(TP, "test")
    assert s.settle(TP, in_flight=0) == [] and s.needs_producer_id
    s.set_producer_id(8, 0)
    assert s.settle(TP, in_flight=0) == [a]
    assert (a.producer_id, a.epoch, a.sequence) == (8, 0, 0)


def test_sequences_wrap_as_kafkas_do():
    assert wire_sequence(2**31 - 1) == 2**31 - 1
    assert wire_sequence(2**31) == 0
    assert wire_sequence(2**31 + 5) == 5


def test_resent_batches_go_back_in_front_of_newer_ones_in_order():
    acc = RecordAccumulator(batch_size=1000, linger=0, delivery_timeout=100, buffer_memory=10**6)
    s = state()
    first, second = batch(created=1), batch(created=2)
    for x in (first, second):
        s.stamp(x)
        x.attempts = 1
    newer = batch(created=3)
    acc.queues[TP] = collections.deque([newer])
    acc.reenqueue(second)
    acc.reenqueue(first)
    assert list(acc.queues[TP]) == [first, second, newer]
