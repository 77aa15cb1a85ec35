"""``PartitionLog.append(..., reuse_buffer=True)``: the offsets are written into the caller's
buffer and the batches stored from it (the Produce path, no copy), and a refused append still
changes nothing, that buffer included."""

from __future__ import annotations

import pytest

from kwire.broker.storage import LOG_APPEND_TIME, PartitionLog
from kwire.protocol.errors import CorruptMessageError, OutOfOrderSequenceNumberError
from kwire.protocol.records import RecordBatch, TimestampType, iter_batches

from .helpers import SMALL, fill, log_files, make_batch, read_all, stored_form
from .test_producer_state import idem


@pytest.fixture
def log(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL)
    yield log
    log.close()


def _state(log):
    return log.log_end_offset, [p.read_bytes() for p in log_files(log.dir)], dict(log.producer_state.producers)


def test_offsets_are_stamped_into_the_given_buffer(log):
    fill(log, 2)
    batches = make_batch(2, tag="a") + make_batch(3, tag="b")
    frame = bytearray(b"HEAD" + batches + b"TAIL")  # a request frame with the records inside
    records = memoryview(frame)[4:-4]
    assert log.append(records, leader_epoch=7, reuse_buffer=True) == (6, 10)
    expected = stored_form(make_batch(2, tag="a"), 6, 7) + stored_form(make_batch(3, tag="b"), 8, 7)
    assert bytes(frame) == b"HEAD" + expected + b"TAIL"  # stamped in place, nothing around it touched
    assert read_all(log, 6) == expected


def test_without_reuse_buffer_or_when_read_only_the_input_is_copied(log):
    batch = make_batch(2)
    mine = bytearray(batch)
    assert log.append(mine) == (0, 1)
    assert log.append(memoryview(batch), reuse_buffer=True) == (2, 3)  # read-only: copied
    assert log.append(batch, reuse_buffer=True) == (4, 5)  # bytes: copied
    assert bytes(mine) == batch
    assert read_all(log) == b"".join(stored_form(batch, base) for base in (0, 2, 4))


def test_log_append_time_is_stamped_in_place_with_a_valid_crc(tmp_path):
    log = PartitionLog(tmp_path / "t-0", SMALL.with_(message_timestamp_type=LOG_APPEND_TIME))
    buf = bytearray(make_batch(3, ts=5))
    log.append(buf, now_ms=777_000, reuse_buffer=True)
    batch = RecordBatch(buf)
    batch.validate()
    assert (batch.timestamp_type, batch.max_timestamp) == (TimestampType.LOG_APPEND_TIME, 777_000)
    assert read_all(log) == bytes(buf)
    log.close()


def test_a_refused_append_leaves_the_buffer_and_the_log_unchanged(log):
    log.append(idem(0))
    good, corrupt = make_batch(2), bytearray(make_batch(2))
    corrupt[-1] ^= 1
    for refused, error in ((bytearray(good) + corrupt, CorruptMessageError),  # the second batch is bad
                           (bytearray(idem(5)), OutOfOrderSequenceNumberError),  # checked after validation
                           (bytearray(idem(1) + idem(1)), OutOfOrderSequenceNumberError)):
        before, original = _state(log), bytes(refused)
        with pytest.raises(error):
            log.append(refused, reuse_buffer=True)
        assert bytes(refused) == original
        assert _state(log) == before


def test_a_retried_batch_returns_its_first_offsets_and_is_not_stamped(log):
    assert log.append(idem(0, 2)) == (0, 1)
    fill(log, 1)
    retry = bytearray(idem(0, 2))
    before, original = _state(log), bytes(retry)
    assert log.append(retry, reuse_buffer=True) == (0, 1)
    assert bytes(retry) == original and _state(log) == before
    assert log.append(bytearray(idem(2)), reuse_buffer=True) == (5, 5)
    assert [b.base_offset for b in iter_batches(read_all(log))] == [0, 2, 5]
