"""pipeline.dataplane.heap_reuse: while a data stage runs, a freed large block is reused by the
next batch instead of being unmapped and faulted in again; afterwards malloc behaves as before.

Measured by the process's minor page faults around allocations of a 64 MiB array, in a fresh
interpreter so no other test's heap state counts."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="heap_reuse tunes glibc's malloc; other C libraries are left alone")

PROBE = r"""
import json, resource, threading
import numpy as np
from baton.pipeline.dataplane.heap_reuse import heap_reuse

SIZE = 64 << 20  # above glibc's largest dynamic mmap threshold (32 MiB)

def faults_per_alloc():
    counts = []
    for _ in range(4):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        a = np.ones(SIZE, np.uint8)  # touches every page
        del a
        counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return min(counts[1:])  # the first allocation may fault in either case

out = {"before": faults_per_alloc()}
with heap_reuse():
    out["inside"] = faults_per_alloc()
    with heap_reuse():  # a second stage overlapping the first: still reusing
        pass
    out["after_inner"] = faults_per_alloc()
out["after"] = faults_per_alloc()
print(json.dumps(out))
"""


def _probe(env: dict[str, str] | None = None) -> dict[str, int]:
    full = {k: v for k, v in os.environ.items()
            if k not in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")}
    full.update(env or {})
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         env=full, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


# a fresh 64 MiB mapping faults at least once per 2 MiB page (numpy asks for huge pages)
FRESH = (64 << 20) // (2 << 20)


def test_a_freed_block_is_reused_inside_and_unmapped_again_after():
    f = _probe()
    assert f["before"] >= FRESH, f  # glibc's default: a fresh mapping per allocation
    assert f["inside"] * 10 <= f["before"], f  # reused: (almost) nothing faulted in again
    assert f["after_inner"] * 10 <= f["before"], f  # the inner stage kept the outer's setting
    assert f["after"] >= FRESH, f  # restored: the block is unmapped on free again


def test_the_users_own_malloc_settings_win():
    f = _probe({"MALLOC_TRIM_THRESHOLD_": "131072"})
    assert f["inside"] >= FRESH, f  # left alone: glibc's behaviour under the user's setting
