"""Record bytes the codec does not hold: placeholders filled in by whoever sends the frame.

A broker answering Fetch has the records in segment files.  Copying them into the encoded
response costs a read and a copy per byte; instead the handler puts a ``SplicedBytes`` (for
example a file range) in the ``records`` field, the codec writes its length prefix and notes
where it goes, and the transport sends the encoded pieces around it with ``os.sendfile``.

Sans-IO: this module only describes the pieces.  ``encode_parts`` returns them; encoding into a
plain ``bytearray`` (``Message.encode``) reads the spliced bytes in, so every caller still works.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from .primitives import Buffer

__all__ = ["GatherBuffer", "SplicedBytes", "SpliceBuffer", "splice_records"]


class SplicedBytes(ABC):
    """A run of bytes supplied at send time.  ``len()`` must be exact before sending."""

    __slots__ = ()

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def read(self) -> bytes:
        """The bytes themselves, for transports that cannot splice (TLS) and for tests."""

    def pieces(self) -> Sequence[Buffer]:
        """The bytes as buffers a gather-write (``socket.sendmsg``) sends in order: ``read()``'s
        one, unless the run is held in pieces already (a sealed record batch's)."""
        return [self.read()]


class SpliceBuffer(bytearray):
    """An encode buffer that records ``SplicedBytes`` positions instead of copying them in."""

    # Records values held in memory are copied in (a GatherBuffer keeps the large ones out).
    gather_from: int | None = None

    def __init__(self) -> None:
        super().__init__()
        self.splices: list[tuple[int, SplicedBytes | Buffer]] = []

    @property
    def total_size(self) -> int:
        return len(self) + sum(len(s) for _, s in self.splices)

    def parts(self) -> list[Buffer | SplicedBytes]:
        """The buffer cut around its splices, in order: bytes, spliced, bytes, ..."""
        out: list[Buffer | SplicedBytes] = []
        start = 0
        view = memoryview(self)
        for pos, spliced in self.splices:
            if pos > start:
                out.append(bytes(view[start:pos]))
            out.append(spliced)
            start = pos
        if start < len(self):
            out.append(bytes(view[start:]))
        view.release()
        return out


class GatherBuffer(SpliceBuffer):
    """A SpliceBuffer that also leaves records held in memory (of ``gather_from`` bytes or more)
    out of the buffer, by reference: a client writes a Produce request's record batches beside
    its encoded fields with one ``socket.sendmsg`` (gather-write) instead of copying each
    megabyte into the frame, and again into the frame's bytes."""

    gather_from = 4096  # smaller ones are cheaper copied than sent as a piece of their own


def splice_records(out: bytearray, value: Buffer | SplicedBytes) -> None:
    """Append a records value (already length-prefixed by the caller) to ``out``."""
    if isinstance(value, SplicedBytes):
        splices = getattr(out, "splices", None)
        if splices is not None:
            splices.append((len(out), value))
        else:
            out += value.read()
        return
    gather_from = getattr(out, "gather_from", None)
    if gather_from is not None and len(value) >= gather_from:
        out.splices.append((len(out), value))  # type: ignore[attr-defined]  # (a SpliceBuffer)
    else:
        out += value
