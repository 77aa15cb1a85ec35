"""Where the cleaner stopped in one partition: Kafka's ``cleaner-offset-checkpoint``.

Records below the stored offset have been cleaned ("the clean section"), those at or above it
are dirty.  Kafka keeps one file per data dir with a line per partition; kwire keeps one small
file per partition (as with ``partition.checkpoint``), so deleting a topic deletes its entry.

Format (text, like Kafka's checkpoints)::

    0                   <- version
    <first dirty offset>
"""

from __future__ import annotations

from pathlib import Path

from ._files import atomic_write

__all__ = ["CLEANER_CHECKPOINT_NAME", "read_cleaner_checkpoint", "write_cleaner_checkpoint"]

CLEANER_CHECKPOINT_NAME = "cleaner-offset-checkpoint"
_VERSION = "0"


def read_cleaner_checkpoint(directory: Path) -> int | None:
    """The first dirty offset, or None when there is no usable checkpoint (then the whole log
    is dirty, as in Kafka when a partition has no entry: nothing is lost, one pass does more)."""
    try:
        lines = (Path(directory) / CLEANER_CHECKPOINT_NAME).read_text("ascii").split("\n")
    except (OSError, UnicodeDecodeError):
        return None
    if len(lines) != 3 or lines[0] != _VERSION or lines[2] or not lines[1].isdigit():
        return None
    return int(lines[1])


def write_cleaner_checkpoint(directory: Path, first_dirty_offset: int) -> None:
    atomic_write(Path(directory) / CLEANER_CHECKPOINT_NAME, f"{_VERSION}\n{first_dirty_offset}\n".encode("ascii"))
