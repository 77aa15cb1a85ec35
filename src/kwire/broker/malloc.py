"""glibc malloc settings for a process that is a broker (``kwire broker``), not for a library user.

Why: every Produce request is received into a buffer of its own (about 1 MB with librdkafka's
defaults), freed once its batches are written.  With glibc's defaults such a buffer comes from
mmap, or from the heap top that ``free`` trims back to the kernel as soon as more than the trim
threshold sits unused there.  Either way the next request's buffer is fresh memory: one page
fault per 4 KiB page touched (about 735 minor faults per MB produced were measured, with 24% of
the broker's CPU in the kernel's fault path).  Fixed thresholds keep those megabytes in the
process and reuse them: the faults go and produce throughput rose (see benchmarks/RESULTS.md).

Setting a threshold explicitly also turns off glibc's dynamic mmap threshold, so the values are
chosen so that every frame up to tens of MiB comes from the heap.  The cost is memory that stays
mapped after a burst: at most about the trim threshold plus the top pad, tens of MiB.

``EmbeddedBroker`` runs inside the caller's process and never calls this: a library must not
change its host's allocator silently.
"""

from __future__ import annotations

import ctypes
import logging
import os

logger = logging.getLogger("kwire.broker")

__all__ = ["tune_malloc", "MMAP_THRESHOLD", "TRIM_THRESHOLD", "TOP_PAD"]

# mallopt parameters, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

# Allocations from this size on get their own mmap (and give it back when freed): above any
# request a librdkafka producer sends with its defaults (a few MB), below the 32 MiB ceiling
# glibc accepts on every 64-bit build (HEAP_MAX_SIZE / 2).
MMAP_THRESHOLD = 32 * 1024 * 1024
# Free memory at the heap top is given back only beyond this: several frames' worth.
TRIM_THRESHOLD = 64 * 1024 * 1024
# Extra memory taken with each heap extension, so growing the heap is rare.
TOP_PAD = 16 * 1024 * 1024

# What a user may have set already (glibc reads these at start): theirs wins.
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def _is_glibc() -> bool:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError, AttributeError):  # not a glibc system (musl, macOS, Windows)
        return False


def tune_malloc(*, mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD,
                top_pad: int = TOP_PAD) -> bool:
    """Set glibc's malloc thresholds for this process; True if every setting took.

    A no-op (False) elsewhere than glibc, and when the environment already sets any of them
    (``MALLOC_*_`` variables or ``GLIBC_TUNABLES`` with a ``glibc.malloc`` entry).
    """
    if not _is_glibc():
        return False
    if any(name in os.environ for name in _USER_SETTINGS) or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        logger.debug("malloc settings left as the environment sets them")
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    ok = True
    for param, value in ((_M_MMAP_THRESHOLD, mmap_threshold), (_M_TRIM_THRESHOLD, trim_threshold),
                         (_M_TOP_PAD, top_pad)):
        if mallopt(param, value) != 1:
            logger.warning("mallopt(%d, %d) was refused", param, value)
            ok = False
    return ok
