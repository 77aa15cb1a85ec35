"""LogManager: partitions of a data directory, clean-shutdown marker, topic deletion, locking."""

from __future__ import annotations

import pytest

from kwire.broker.storage import CLEAN_SHUTDOWN_FILE, LogManager
from kwire.protocol.errors import (
    InvalidTopicException,
    KafkaStorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from .helpers import SMALL, fill, log_files, make_batch, read_all


def test_create_get_and_reopen_after_clean_close(tmp_path):
    mgr = LogManager(tmp_path, SMALL)
    assert mgr.clean_shutdown is False
    for n in range(3):
        mgr.create_partition("my-topic-1", n)
    mgr.create_partition("other", 0)
    fill(mgr.get("my-topic-1", 2), 20)
    data = read_all(mgr.get("my-topic-1", 2))
    assert mgr.partitions() == [("my-topic-1", 0), ("my-topic-1", 1), ("my-topic-1", 2), ("other", 0)]
    assert mgr.create_partition("other", 0, exist_ok=True) is mgr.get("other", 0)
    with pytest.raises(TopicAlreadyExistsError):
        mgr.create_partition("other", 0)
    with pytest.raises(UnknownTopicOrPartitionError):
        mgr.get("other", 1)
    mgr.close()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()

    mgr = LogManager(tmp_path, SMALL)
    assert mgr.clean_shutdown is True
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()  # a crash from now on must recover
    assert mgr.partitions() == [("my-topic-1", 0), ("my-topic-1", 1), ("my-topic-1", 2), ("other", 0)]
    assert read_all(mgr.get("my-topic-1", 2)) == data
    assert mgr.load_findings == {}
    mgr.close()


def test_unclean_close_leads_to_recovery(tmp_path):
    mgr = LogManager(tmp_path, SMALL)
    log = mgr.create_partition("t", 0)
    fill(log, 40)
    mgr.close(clean=False)
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    last = log_files(tmp_path / "t-0")[-1]
    last.write_bytes(last.read_bytes()[:-5])
    mgr = LogManager(tmp_path, SMALL)
    assert mgr.clean_shutdown is False
    (finding,) = mgr.load_findings[("t", 0)]
    assert "truncated" in finding
    assert mgr.get("t", 0).log_end_offset == 117
    mgr.close()


def test_delete_topic(tmp_path):
    mgr = LogManager(tmp_path, SMALL)
    for n in range(2):
        fill(mgr.create_partition("doomed", n), 5)
    fill(mgr.create_partition("kept", 0), 5)
    assert mgr.delete_topic("doomed") == [0, 1]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["kept-0"]
    with pytest.raises(UnknownTopicOrPartitionError):
        mgr.get("doomed", 0)
    with pytest.raises(UnknownTopicOrPartitionError):
        mgr.delete_topic("doomed")
    assert mgr.create_partition("doomed", 0).log_end_offset == 0  # a new topic starts afresh
    assert mgr.get("kept", 0).log_end_offset == 15
    mgr.close()


def test_leftover_deleted_directory_is_removed_at_open(tmp_path):
    mgr = LogManager(tmp_path, SMALL)
    fill(mgr.create_partition("t", 0), 3)
    mgr.close()
    (tmp_path / "t-0").rename(tmp_path / "t-0.abc.deleted")  # crash mid delete_topic
    mgr = LogManager(tmp_path, SMALL)
    assert mgr.partitions() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock"]
    mgr.close()


def test_data_dir_is_locked(tmp_path):
    mgr = LogManager(tmp_path, SMALL)
    with pytest.raises(KafkaStorageError, match="in use"):
        LogManager(tmp_path, SMALL)
    mgr.close()
    LogManager(tmp_path, SMALL).close()


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "x" * 250, "spa ce"])
def test_invalid_topic_names(tmp_path, name):
    with LogManager(tmp_path, SMALL) as mgr:
        with pytest.raises(InvalidTopicException):
            mgr.create_partition(name, 0)


def test_flush_all_and_retention_all(tmp_path):
    with LogManager(tmp_path, SMALL.with_(retention_ms=1_000)) as mgr:
        log = mgr.create_partition("t", 0)
        fill(log, 40, ts0=1_000)
        assert log.recovery_point < log.log_end_offset
        mgr.flush_all()
        assert log.recovery_point == log.log_end_offset
        deleted = mgr.apply_retention_all(now_ms=10_000_000)
        assert list(deleted) == [("t", 0)] and len(deleted[("t", 0)]) >= 3
        assert log.log_start_offset == log.log_end_offset == 120
        log.append(make_batch(1))
    with pytest.raises(KafkaStorageError):
        mgr.get("t", 0)
