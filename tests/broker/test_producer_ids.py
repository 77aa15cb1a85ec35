"""ProducerIdManager: ids unique for the life of a data directory, crashes included."""

from __future__ import annotations

import ast
import signal
import subprocess
import sys
import textwrap

import pytest

from kwire.broker import producer_ids as producer_ids_module
from kwire.broker.producer_ids import BLOCK_SIZE, FIRST_PRODUCER_ID, ProducerIdManager
from kwire.protocol.errors import CoordinatorLoadInProgressError, KafkaStorageError


def stored(manager: ProducerIdManager) -> int:
    version, value, end = manager.path.read_text("ascii").split("\n")
    assert (version, end) == ("0", "")
    return int(value)


def test_ids_are_consecutive_from_the_first(tmp_path):
    manager = ProducerIdManager(tmp_path)
    assert [manager.allocate() for _ in range(5)] == list(range(FIRST_PRODUCER_ID, FIRST_PRODUCER_ID + 5))
    assert manager.path.parent.name == "__kwire"
    manager.close()


def test_block_is_persisted_before_its_first_id_is_handed_out(tmp_path, monkeypatch):
    manager = ProducerIdManager(tmp_path, block_size=3)
    assert not manager.path.exists()
    seen = []
    real_write = manager._write

    def spy(value):
        seen.append((value, manager._next))  # stored while the block's first id is still unused
        real_write(value)

    monkeypatch.setattr(manager, "_write", spy)
    ids = [manager.allocate() for _ in range(7)]
    assert ids == list(range(7))
    assert seen == [(3, 0), (6, 3), (9, 6)]
    assert stored(manager) == 9


def test_clean_restart_continues_where_it_stopped(tmp_path):
    manager = ProducerIdManager(tmp_path)
    ids = [manager.allocate() for _ in range(3)]
    manager.close()
    assert stored(manager) == 3  # the unused rest of the block is given back
    manager = ProducerIdManager(tmp_path)
    assert manager.allocate() == ids[-1] + 1
    manager.close()


def test_unclean_stop_never_reuses_ids(tmp_path):
    manager = ProducerIdManager(tmp_path)
    first_run = {manager.allocate() for _ in range(BLOCK_SIZE + 5)}  # into the second block
    # No close(): the process died.  The next run starts above every reserved id.
    again = ProducerIdManager(tmp_path)
    second_run = [again.allocate() for _ in range(10)]
    assert not first_run & set(second_run)
    assert min(second_run) == 2 * BLOCK_SIZE
    again.close()


def test_restart_without_allocations_keeps_the_stored_bound(tmp_path):
    manager = ProducerIdManager(tmp_path, block_size=10)
    manager.allocate()
    # crash, then a run that allocates nothing and closes cleanly
    idle = ProducerIdManager(tmp_path, block_size=10)
    idle.close()
    assert stored(idle) == 10
    assert ProducerIdManager(tmp_path, block_size=10).allocate() == 10


def test_ids_survive_kill_9(tmp_path):
    script = textwrap.dedent(f"""
        import os, signal, sys
        sys.path[:0] = {sys.path!r}
        from kwire.broker.producer_ids import ProducerIdManager
        manager = ProducerIdManager({str(tmp_path)!r}, block_size=4)
        sys.stdout.write(repr([manager.allocate() for _ in range(6)]))
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    handed_out = ast.literal_eval(proc.stdout)
    assert handed_out == list(range(6))
    manager = ProducerIdManager(tmp_path, block_size=4)
    assert manager.allocate() == 8  # the rest of the second block (6, 7) is skipped, never reused
    manager.close()


def test_was_allocated(tmp_path):
    manager = ProducerIdManager(tmp_path, block_size=10)
    assert not manager.was_allocated(0)
    pid = manager.allocate()
    assert manager.was_allocated(pid)
    assert not manager.was_allocated(pid + 1)  # reserved, but not yet given to anyone
    assert not manager.was_allocated(-1)
    manager.close()


def test_unreadable_file_refuses_to_start(tmp_path):
    manager = ProducerIdManager(tmp_path)
    manager.allocate()
    manager.path.write_text("0\nnot a number\n")
    with pytest.raises(KafkaStorageError, match="cannot parse"):
        ProducerIdManager(tmp_path)
    manager.path.write_text("0\n-5\n")
    with pytest.raises(KafkaStorageError, match="out of range"):
        ProducerIdManager(tmp_path)


def test_failed_reservation_hands_out_nothing(tmp_path, monkeypatch):
    manager = ProducerIdManager(tmp_path, block_size=2)
    assert [manager.allocate(), manager.allocate()] == [0, 1]

    def full_disk(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(producer_ids_module, "atomic_write", full_disk)
    with pytest.raises(CoordinatorLoadInProgressError):
        manager.allocate()
    monkeypatch.undo()
    assert manager.allocate() == 2
    assert stored(manager) == 4


def test_closed_manager_refuses(tmp_path):
    manager = ProducerIdManager(tmp_path)
    manager.close()
    manager.close()  # idempotent
    with pytest.raises(KafkaStorageError, match="closed"):
        manager.allocate()


def test_block_size_must_be_positive(tmp_path):
    with pytest.raises(ValueError):
        ProducerIdManager(tmp_path, block_size=0)
