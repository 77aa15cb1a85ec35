"""The record types yielded by batch readers: one shape for magic 0, 1 and 2."""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple

from ..primitives import INT16, INT32

__all__ = ["Record", "ControlRecord", "ControlRecordType", "TimestampType", "NO_TIMESTAMP"]

#: Timestamp of magic-v0 records, which have none (Kafka's RecordBatch.NO_TIMESTAMP).
NO_TIMESTAMP = -1


class TimestampType(IntEnum):
    """Attributes bit 3: who set the timestamps."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(IntEnum):
    """Control record types (the int16 after the version in a control record's key)."""

    ABORT = 0
    COMMIT = 1


# Records are tuples so readers can create them with one C-level ``tuple.__new__`` call
# (much cheaper than running an ``__init__``); fields are read through namedtuple's fast
# C descriptors.
class Record(NamedTuple):
    """One record: absolute offset, timestamp (ms), key, value and headers."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class ControlRecord(Record):
    """A record of a control batch: its key is ``int16 version, int16 type``.

    For transaction markers (ABORT/COMMIT) the value is ``int16 version, int32 coordinator epoch``.
    Readers check the key is at least 4 bytes long before creating one.
    """

    __slots__ = ()

    @property
    def version(self) -> int:
        """Control key version (0 for every Kafka release so far)."""
        version: int = INT16.unpack_from(self.key, 0)[0]  # type: ignore[arg-type]  # never None (readers check)
        return version

    @property
    def type(self) -> int:
        """Control type: 0 abort, 1 commit (other values are KRaft/internal markers)."""
        control_type: int = INT16.unpack_from(self.key, 2)[0]  # type: ignore[arg-type]  # never None
        return control_type

    @property
    def is_commit(self) -> bool:
        return self.type == ControlRecordType.COMMIT

    @property
    def is_abort(self) -> bool:
        return self.type == ControlRecordType.ABORT

    @property
    def coordinator_epoch(self) -> int | None:
        """Coordinator epoch of an end-transaction marker (None if the value has none)."""
        value = self.value
        if value is None or len(value) < 6:
            return None
        epoch: int = INT32.unpack_from(value, 2)[0]
        return epoch


def control_key(control_type: int, version: int = 0) -> bytes:
    """The key of a control record."""
    return INT16.pack(version) + INT16.pack(control_type)


def end_txn_marker_value(coordinator_epoch: int, version: int = 0) -> bytes:
    """The value of an ABORT/COMMIT transaction marker."""
    return INT16.pack(version) + INT32.pack(coordinator_epoch)

