"""fsync "always": an OffsetCommit is answered only after the journal's fsync, and that fsync
runs in a worker thread, not on the event loop; a failed fsync is not acknowledged.  (The
journal is the group's partition of __consumer_offsets.)"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading

from kwire.broker.handlers import HANDLERS
from kwire.protocol import messages
from kwire.protocol.errors import CoordinatorNotAvailableError

from . import OFFSET_COMMIT, Broker, commit, context, fetch, run

NONE = 0


def _broker(tmp_path) -> Broker:
    broker = Broker(tmp_path, fsync="always")
    broker.topics.add("t", 2)
    return broker


def _journal_fd(broker: Broker, group: str = "g") -> int:
    """The file descriptor of the segment group ``group``'s records go to."""
    log = broker.internal_topics.partition_log("__consumer_offsets", broker.coordinator.store.partition_of(group))
    return log.segments[-1].log_fd()


class JournalFsyncs:
    """Records which thread fsyncs the journal; can make those fsyncs fail."""

    def __init__(self, monkeypatch, journal_fd: int, fail: bool = False):
        self.real, self.journal_ino, self.fail = os.fsync, os.fstat(journal_fd).st_ino, fail
        self.threads: list[threading.Thread] = []
        monkeypatch.setattr(os, "fsync", self)

    def __call__(self, fd: int) -> None:
        if os.fstat(fd).st_ino == self.journal_ino:
            self.threads.append(threading.current_thread())
            if self.fail:
                raise OSError(5, "Input/output error")
        self.real(fd)


def _commit_request(offset: int):
    R = messages.OffsetCommitRequest
    return R(group_id="g", generation_id_or_member_epoch=-1, member_id="", topics=[R.OffsetCommitRequestTopic(
        name="t", partitions=[R.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=offset, committed_metadata="")])])


def test_the_commit_is_answered_after_an_fsync_off_the_event_loop(tmp_path, monkeypatch):
    broker = _broker(tmp_path)
    store = broker.coordinator.store
    fsyncs = JournalFsyncs(monkeypatch, _journal_fd(broker))

    async def scenario():
        pending = HANDLERS[OFFSET_COMMIT].fn(context(broker, OFFSET_COMMIT, 8), _commit_request(5))
        assert inspect.isawaitable(pending)  # not answered yet...
        assert store.dirty and not fsyncs.threads  # ...written, but not fsynced on the loop
        response = await pending
        assert not store.dirty
        return response

    response = run(scenario())
    assert response.topics[0].partitions[0].error_code == NONE
    assert len(fsyncs.threads) == 1 and fsyncs.threads[0] is not threading.main_thread()
    # Commits arriving together share fsyncs.
    before = store.fsyncs

    async def many():
        return await asyncio.gather(*(commit(broker, "g", {("t", 1): i}) for i in range(20)))

    assert all(r == {("t", 1): NONE} for r in run(many()))
    assert 1 <= store.fsyncs - before < 20
    reopened = broker.reopen(clean=False)  # what was acknowledged was fsynced
    assert run(fetch(reopened, "g", {"t": [0, 1]})) == {("t", 0): (5, -1, "", NONE), ("t", 1): (19, -1, "", NONE)}
    reopened.coordinator.close()


def test_a_failed_fsync_is_not_acknowledged(tmp_path, monkeypatch, caplog):
    broker = _broker(tmp_path)
    JournalFsyncs(monkeypatch, _journal_fd(broker), fail=True)
    assert run(commit(broker, "g", {("t", 0): 1})) == {("t", 0): CoordinatorNotAvailableError.code}
    assert broker.coordinator.store.dirty  # still to be synced
    assert any("fsync failed" in r.getMessage() for r in caplog.records)
    monkeypatch.undo()
    broker.coordinator.close()
