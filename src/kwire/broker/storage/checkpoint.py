"""The per-partition checkpoint: log start offset and recovery point, written atomically.

Kafka keeps these in two files per data dir; one small file per partition keeps partitions
independent (a topic delete is a directory rename) at the cost of more files.

Format (text, like Kafka's checkpoints)::

    0                        <- version
    <log start offset> <recovery point>
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ._files import atomic_write

__all__ = ["CHECKPOINT_NAME", "PartitionCheckpoint", "CorruptCheckpointError", "read_checkpoint",
           "write_checkpoint"]

CHECKPOINT_NAME = "partition.checkpoint"
_VERSION = "0"


class CorruptCheckpointError(ValueError):
    """The checkpoint file exists but can't be parsed."""


@dataclass(frozen=True)
class PartitionCheckpoint:
    log_start_offset: int
    # Every offset below this is known to be fsynced: recovery after a crash starts here.
    recovery_point: int


def read_checkpoint(directory: Path) -> PartitionCheckpoint | None:
    """The stored checkpoint, None if there is none; ``CorruptCheckpointError`` if unreadable."""
    path = directory / CHECKPOINT_NAME
    try:
        text = path.read_text("ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptCheckpointError(f"{path.name}: {exc}") from None
    lines = text.split("\n")
    try:
        if lines[0] != _VERSION or len(lines) != 3 or lines[2]:
            raise ValueError("unexpected layout")
        start, recovery = (int(v) for v in lines[1].split(" "))
    except ValueError:
        raise CorruptCheckpointError(f"{path.name}: cannot parse {text[:80]!r}") from None
    if start < 0 or recovery < 0:
        raise CorruptCheckpointError(f"{path.name}: negative offset in {text[:80]!r}")
    return PartitionCheckpoint(start, recovery)


def write_checkpoint(directory: Path, checkpoint: PartitionCheckpoint) -> None:
    text = f"{_VERSION}\n{checkpoint.log_start_offset} {checkpoint.recovery_point}\n"
    atomic_write(directory / CHECKPOINT_NAME, text.encode("ascii"))
