"""CRC-32C (Castagnoli), the checksum of v2 record batches: ``crc32c(data, value=0)``.

The compiled helper's (``_layout.crc32c``, the CPU's crc32 instruction) where it is built and the
CPU has SSE4.2, else the ``crc32c`` package's.  Both give the same values and chain the same way
(``crc32c(b, crc32c(a)) == crc32c(a + b)``).  The package is imported only when needed: its
import reads the metadata of every installed distribution (``importlib.metadata``), which costs
a command line about a tenth of a second before it does anything.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["compiled", "crc32c"]


def _choose() -> Callable[..., int]:
    try:
        from . import _layout
    except ImportError:
        pass
    else:
        if hasattr(_layout, "crc32c") and _layout.crc32c_hardware():
            return _layout.crc32c
    from crc32c import crc32c as package_crc32c

    return package_crc32c


crc32c: Callable[..., int] = _choose()


def compiled() -> bool:
    """Whether the compiled helper computes the CRCs."""
    return getattr(crc32c, "__module__", "") == "kwire.protocol.records._layout"
