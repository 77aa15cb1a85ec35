"""CreateTime bounds (Kafka's message.timestamp.before/after.max.ms): a record too far from the
broker's clock is INVALID_TIMESTAMP, the whole append refused and nothing stored."""

from __future__ import annotations

import pytest

from kwire.broker.storage import LogConfig, PartitionLog
from kwire.protocol.errors import InvalidTimestampError

from .helpers import make_batch, read_all

NOW = 1_700_000_000_000
HOUR = 3600 * 1000


@pytest.fixture
def log_for(tmp_path):
    opened = []

    def make(**settings) -> PartitionLog:
        log = PartitionLog(tmp_path / f"t-{len(opened)}", LogConfig(**settings))
        opened.append(log)
        return log

    yield make
    for log in opened:
        log.close()


def test_kafkas_default_refuses_a_record_more_than_an_hour_ahead(log_for):
    log = log_for()
    assert LogConfig().message_timestamp_after_max_ms == HOUR
    log.append(make_batch(2, ts=NOW + HOUR - 1), now_ms=NOW)  # the last record exactly at the bound
    with pytest.raises(InvalidTimestampError, match="message.timestamp.after.max.ms"):
        log.append(make_batch(3, ts=NOW, ts_step=HOUR), now_ms=NOW)  # its last record is 2 h ahead
    assert log.log_end_offset == 2
    assert len(read_all(log)) > 0


def test_old_records_pass_unless_before_max_ms_is_set(log_for):
    default = log_for()
    default.append(make_batch(1, ts=1), now_ms=NOW)  # no bound behind by default
    bounded = log_for(message_timestamp_before_max_ms=HOUR)
    bounded.append(make_batch(2, ts=NOW - HOUR), now_ms=NOW)
    # The first record is two hours old, the last one new: only a look at every record sees it.
    with pytest.raises(InvalidTimestampError, match="offset delta 0.*message.timestamp.before.max.ms"):
        bounded.append(make_batch(3, ts=NOW - 2 * HOUR, ts_step=HOUR), now_ms=NOW)
    assert bounded.log_end_offset == 2


def test_log_append_time_topics_take_any_producer_timestamp(log_for):
    log = log_for(message_timestamp_type="LogAppendTime", message_timestamp_before_max_ms=0,
                  message_timestamp_after_max_ms=0)
    log.append(make_batch(2, ts=NOW + 10 * HOUR), now_ms=NOW)
    log.append(make_batch(2, ts=1), now_ms=NOW)
    assert log.log_end_offset == 4
