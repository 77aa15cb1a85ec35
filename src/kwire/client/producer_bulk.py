"""What became of the records of one ``produce_many``/``send_many`` call: ``BulkDelivery``.

A bulk call hands the producer a column of values (and keys) at once, and gets no future per
record: that is what makes it cheap (a record costs well under a microsecond of Python).  Its
outcome is counted instead, batch by batch as the broker answers: how many records were
delivered, how many failed and the first error, where each partition's records went (count,
first and last offset), and on demand every record's partition and offset in input order.

The producer's event loop updates it; other threads read it once it is done (``result()`` waits
for that, ``await delivery`` in asyncio code).
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

__all__ = ["BulkDelivery", "PartitionSummary"]


class PartitionSummary:
    """The records of one bulk call that went to one partition and were delivered."""

    __slots__ = ("partition", "records", "first_offset", "last_offset")

    def __init__(self, partition: int, records: int, first_offset: int, last_offset: int):
        self.partition = partition
        self.records = records
        self.first_offset = first_offset    # -1 with acks=0: the broker does not say
        self.last_offset = last_offset

    def __repr__(self) -> str:
        return (f"PartitionSummary(partition={self.partition}, records={self.records}, "
                f"first_offset={self.first_offset}, last_offset={self.last_offset})")


class BulkDelivery:
    """The delivery of the ``records`` records of one bulk call to ``topic``.

    ``delivered`` and ``failed`` count records as their batches complete; ``error`` is the first
    error a record failed with (None while none has).  ``done()`` once every record is delivered
    or failed.  ``partitions()`` and ``offsets()`` say where they went.
    """

    def __init__(self, topic: str, records: int, loop: asyncio.AbstractEventLoop | None = None):
        self.topic = topic
        self.records = records
        self.delivered = 0
        self.failed = 0
        self.error: BaseException | None = None
        # Where runs of records went: (partition, first offset or -1, group, start, stop, failed)
        # with records group[start:stop] of the call (group None: the call's own order).
        self._spans: list[tuple[int, int, Sequence[int] | None, int, int, bool]] = []
        self._event = threading.Event()
        self._waiter: asyncio.Future[None] | None = loop.create_future() if loop is not None else None
        if records == 0:
            self._finish()

    def __repr__(self) -> str:
        state = "done" if self.done() else "pending"
        return (f"<BulkDelivery {self.topic} {self.records} records: {self.delivered} delivered, "
                f"{self.failed} failed, {state}>")

    # -- reading ----------------------------------------------------------------------------------
    def done(self) -> bool:
        """Whether every record is delivered or failed."""
        return self._event.is_set()

    def result(self, timeout: float | None = None) -> BulkDelivery:
        """Wait (``timeout`` seconds at most, None: as long as it takes) until ``done()``; returns
        this object.  ``TimeoutError`` if it is not done by then.  Do not call it on the
        producer's own event loop (``await`` the delivery there)."""
        if not self._event.wait(timeout):
            raise TimeoutError(f"{self.records - self.delivered - self.failed} of {self.records} records "
                               f"not completed within {timeout:g} s")
        return self

    def __await__(self) -> Generator[Any, None, BulkDelivery]:
        if self._waiter is None:
            raise RuntimeError("this delivery belongs to a synchronous Producer: call result()")
        import asyncio  # here: the blocking producer's deliveries are read without an event loop

        yield from asyncio.shield(self._waiter).__await__()
        return self

    def partitions(self) -> list[PartitionSummary]:
        """Per partition, in partition order: how many records were delivered there, and their first
        and last offset (-1 when the broker gave none: acks=0)."""
        by_partition: dict[int, PartitionSummary] = {}
        for partition, base, _, start, stop, failed in self._spans:
            if failed:
                continue
            first, last = (base, base + stop - start - 1) if base >= 0 else (-1, -1)
            s = by_partition.get(partition)
            if s is None:
                by_partition[partition] = PartitionSummary(partition, stop - start, first, last)
            else:
                s.records += stop - start
                s.first_offset = min(s.first_offset, first)
                s.last_offset = max(s.last_offset, last)
        return [by_partition[p] for p in sorted(by_partition)]

    def offsets(self) -> list[tuple[int, int] | None]:
        """Each record's ``(partition, offset)`` in the order given (offset -1 with acks=0: the
        broker does not say); None for a record that failed or is not completed yet."""
        out: list[tuple[int, int] | None] = [None] * self.records
        for partition, base, group, start, stop, failed in self._spans:
            if failed:
                continue
            indexes = range(start, stop) if group is None else group[start:stop]
            if base < 0:
                for i in indexes:
                    out[i] = (partition, -1)
            else:
                for i, offset in zip(indexes, range(base, base + stop - start), strict=True):
                    out[i] = (partition, offset)
        return out

    # -- updating (the producer's event loop) -----------------------------------------------------
    def _complete(self, partition: int, base_offset: int, group: Sequence[int] | None, start: int, stop: int,
                  error: BaseException | None) -> None:
        """Records ``group[start:stop]`` went to ``partition`` from ``base_offset`` on, or failed."""
        self._spans.append((partition, base_offset, group, start, stop, error is not None))
        if error is None:
            self.delivered += stop - start
        else:
            self.failed += stop - start
            if self.error is None:
                self.error = error
        if self.delivered + self.failed >= self.records:
            self._finish()

    def _fail(self, group: Sequence[int] | None, start: int, stop: int, error: BaseException,
              partition: int = -1) -> None:
        """Records that never reached a batch (too large, or the call stopped before them)."""
        if stop > start:
            self._complete(partition, -1, group, start, stop, error)

    def _finish(self) -> None:
        self._event.set()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
