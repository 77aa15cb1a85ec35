"""Crash safety of log compaction: a process killed (SIGKILL) at each step of a clean leaves a
log that reopens holding what no clean or the finished clean would hold; and the loader's part
(Kafka's LogLoader): a ``.swap`` completes its swap, ``.cleaned`` files are removed."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from kwire.broker.storage import PartitionLog
from kwire.broker.storage._files import CLEANED_SUFFIX, SWAP_SUFFIX

from .cleaner_helpers import COMPACT, NOW, clean, file_names, put, records

# Big segments rolled by hand: the whole dirty range is one group, so one swap.
CONFIG = COMPACT.with_(segment_bytes=1 << 20)

_CHILD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from kwire.broker.storage import Cleaner, CleanerConfig, LogConfig, PartitionLog

    directory, config, stop_at = Path(sys.argv[1]), eval(sys.argv[2]), sys.argv[3]

    def hook(step):
        if step == stop_at:
            print(step, flush=True)
            time.sleep(60)  # the parent kills us here

    log = PartitionLog(directory, config)
    Cleaner(CleanerConfig(), hook=hook).clean(log, now_ms=int(sys.argv[4]))
    print("finished", flush=True)
""")


def make_log(directory) -> list:
    log = PartitionLog(directory, CONFIG)
    try:
        for r in range(6):
            put(log, [(f"k{i}", f"v{r}-{i}") for i in range(4)], ts=1_000 + r)
            put(log, [(f"only{r}", "x"), ("k0", None if r == 5 else f"w{r}")], ts=1_000 + r)
            log.roll()
        return records(log)
    finally:
        log.close()


def reopened_records(directory) -> tuple[list, list[str]]:
    log = PartitionLog(directory, CONFIG)
    try:
        return records(log), list(log.load_findings)
    finally:
        log.close()


@pytest.fixture
def cleaned_reference(tmp_path):
    """What the log holds after a finished clean, from a copy cleaned in this process."""
    make_log(tmp_path / "ref-0")
    log = PartitionLog(tmp_path / "ref-0", CONFIG)
    try:
        clean(log, now_ms=NOW)
        return records(log)
    finally:
        log.close()


@pytest.mark.parametrize("step", ["copying", "cleaned", "swap", "delete-first", "deleted", "renamed", "synced",
                                  "checkpointed"])
def test_kill_at_each_step_of_a_clean_leaves_the_old_or_the_new_log(tmp_path, step, cleaned_reference):
    directory = tmp_path / "t-0"
    before = make_log(directory)
    assert before != cleaned_reference
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(directory), repr(CONFIG), step, str(NOW)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline().strip()
        assert line == step, child.stderr.read()
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=30)
    after, findings = reopened_records(directory)
    # Up to the .log.swap rename nothing has happened; from it on the clean is complete.
    expected = before if step in ("copying", "cleaned") else cleaned_reference
    assert after == expected, findings
    assert not [n for n in file_names(directory) if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, ".deleted"))]
    # The log works on: a later clean reaches the same result.
    log = PartitionLog(directory, CONFIG)
    try:
        clean(log, now_ms=NOW)
        assert records(log) == cleaned_reference
    finally:
        log.close()


def _prepare_half_done_swap(tmp_path, *, stop_after: str):
    """A log and, beside it, the files a clean killed after ``stop_after`` left (made in this
    process by stopping the clean with an exception at that step)."""
    directory = tmp_path / "t-0"
    before = make_log(directory)

    class Stop(Exception):
        pass

    def hook(step):
        if step == stop_after:
            raise Stop

    from kwire.broker.storage import Cleaner, CleanerConfig

    log = PartitionLog(directory, CONFIG)
    with pytest.raises(Stop):
        Cleaner(CleanerConfig(), hook=hook).clean(log, now_ms=NOW)
    log.close_without_flush()
    return directory, before


def test_loader_completes_a_swap_whose_old_segments_are_still_there(tmp_path, cleaned_reference):
    directory, before = _prepare_half_done_swap(tmp_path, stop_after="swap")
    names = file_names(directory)
    assert "00000000000000000000.log.swap" in names and "00000000000000000000.log" in names
    assert len([n for n in names if n.endswith(".log")]) == 7  # the six old ones and the active one
    after, findings = reopened_records(directory)
    assert after == cleaned_reference
    assert any("completed the log cleaner's swap of segment 0" in f for f in findings)
    assert len([n for n in file_names(directory) if n.endswith(".log")]) == 2


def test_a_committed_swap_over_segments_deleted_meanwhile_installs_nothing_readable_below_the_start(tmp_path):
    # A crash after the commit (the renames to .swap) and a DeleteRecords that removed some of
    # the segments the swap replaces, before the swap's check refused it: the loader completes
    # the swap, and what it brings back lies below the log start offset, which the checkpoint
    # kept, so every readable record is as a finished clean leaves it.
    directory = tmp_path / "t-0"
    make_log(directory)

    class Stop(Exception):
        pass

    from kwire.broker.storage import Cleaner, CleanerConfig

    log = PartitionLog(directory, CONFIG)
    start = log.segments[2].base_offset

    def hook(step):
        if step == "swap":
            log.delete_records(start)
            raise Stop

    with pytest.raises(Stop):
        Cleaner(CleanerConfig(), hook=hook).clean(log, now_ms=NOW)
    log.close_without_flush()
    reference = tmp_path / "ref-0"
    make_log(reference)
    ref = PartitionLog(reference, CONFIG)
    try:
        clean(ref, now_ms=NOW)
        expected = [r for r in records(ref) if r[0] >= start]
    finally:
        ref.close()
    reopened = PartitionLog(directory, CONFIG)
    try:
        assert reopened.log_start_offset == start
        assert records(reopened) == expected
        assert any("completed the log cleaner's swap" in f for f in reopened.load_findings)
    finally:
        reopened.close()


def test_loader_completes_a_swap_half_renamed(tmp_path, cleaned_reference):
    directory, _ = _prepare_half_done_swap(tmp_path, stop_after="deleted")
    # As if killed between the renames to the final names: the indexes renamed, the .log not.
    for suffix in (".index", ".timeindex", ".txnindex"):
        os.replace(directory / f"{0:020d}{suffix}.swap", directory / f"{0:020d}{suffix}")
    after, _ = reopened_records(directory)
    assert after == cleaned_reference


def test_loader_removes_cleaned_files_of_a_clean_that_never_swapped(tmp_path):
    directory = tmp_path / "t-0"
    before = make_log(directory)
    # What a clean killed while copying leaves: .cleaned files (here, copies of a segment's),
    # and, killed between the renames to .swap, an index .swap without its .log.swap.
    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
        shutil.copy(directory / f"{0:020d}{suffix}", directory / f"{0:020d}{suffix}.cleaned")
    shutil.copy(directory / f"{0:020d}.index", directory / f"{0:020d}.index.swap")
    after, findings = reopened_records(directory)
    assert after == before
    assert any("removed leftover file 00000000000000000000.log.cleaned" in f for f in findings)
    assert not [n for n in file_names(directory) if n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX))]


def test_an_empty_swap_replaces_nothing(tmp_path):
    directory = tmp_path / "t-0"
    before = make_log(directory)
    (directory / f"{0:020d}.log.swap").write_bytes(b"junk")
    after, findings = reopened_records(directory)
    assert after == before
    assert any("holds no batch" in f for f in findings)
