"""Let a data stage reuse the memory it frees instead of faulting fresh pages in for every batch.

TensorFlow's string kernels allocate large temporaries on each call: `tf.unique` reserves two
hash slots per value, `tf.strings.split` grows a vector of views, and their outputs are
tensors of a batch's tokens. glibc's malloc serves a block above its mmap threshold (dynamic,
at most 32 MiB) with a fresh `mmap` and unmaps it on free, and trims the heap's free top above
its trim threshold, so each batch touches new pages and the kernel zeroes them again. Measured
on the text transform of the data benchmark (1M rows, a vocabulary over `tf.strings.split`
tokens): about 330k minor page faults (1.3 GB) and 0.7 s of system time on 2 cores. With the
mmap threshold at 256 MiB and the trim threshold at 1 GiB while the stage runs, freed blocks
stay in the heap and the next batch reuses them: about 85k faults and 0.3 s (docs/
benchmarks-data.md).

On exit the thresholds go to the values glibc's dynamic mode settles at after large frees
(mmap 32 MiB, trim 64 MiB: setting them once turns the dynamic mode off for the process) and
`malloc_trim(0)` hands the stage's freed memory back, so the stages after it in the same
process start as they would have. Left alone: a C library other than glibc, and a user who
set glibc's own malloc settings (`MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`,
`GLIBC_TUNABLES`), which win. Stages that overlap in one process share one setting: the
first to enter sets it, the last to leave restores it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

# mallopt's parameter numbers (glibc malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

STAGE_MMAP_THRESHOLD = 256 << 20
STAGE_TRIM_THRESHOLD = 1 << 30
AFTER_MMAP_THRESHOLD = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
AFTER_TRIM_THRESHOLD = 64 << 20  # what the dynamic mode sets beside it: twice the mmap one

USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")

_lock = threading.Lock()
_holders = 0


def _glibc() -> Any:
    """The process's glibc, or None (another C library, or malloc left to the user)."""
    import ctypes
    import platform

    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    if any(os.environ.get(name) for name in USER_SETTINGS):
        return None
    libc = ctypes.CDLL(None)
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


@contextlib.contextmanager
def heap_reuse() -> Iterator[None]:
    """Freed blocks stay in the heap for the next batch until exit (see the module's text)."""
    global _holders
    libc = _glibc()
    if libc is None:
        yield
        return
    with _lock:
        _holders += 1
        if _holders == 1:
            libc.mallopt(M_MMAP_THRESHOLD, STAGE_MMAP_THRESHOLD)
            libc.mallopt(M_TRIM_THRESHOLD, STAGE_TRIM_THRESHOLD)
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                libc.mallopt(M_MMAP_THRESHOLD, AFTER_MMAP_THRESHOLD)
                libc.mallopt(M_TRIM_THRESHOLD, AFTER_TRIM_THRESHOLD)
                libc.malloc_trim(0)
