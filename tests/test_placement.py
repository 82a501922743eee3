"""Where a timing window's host memory comes from (pkit.harness.placement): glibc's allocator keeps large blocks
in pages mapped for them alone once the threshold is fixed, also after a larger block was freed."""
import ctypes
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import ctypes
from pkit.harness.placement import own_pages_per_set

libc = ctypes.CDLL(None)


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


libc.mallinfo2.restype = MallInfo2
libc.malloc.argtypes, libc.malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]


def mapped_after_a_larger_block_freed(freed, size):
    libc.free(libc.malloc(freed))
    before = libc.mallinfo2().hblks
    block = libc.malloc(size)
    mapped = libc.mallinfo2().hblks == before + 1
    libc.free(block)
    return mapped


print(mapped_after_a_larger_block_freed(8 << 20, 1 << 20), own_pages_per_set(),
      mapped_after_a_larger_block_freed(8 << 20, 1 << 20))
"""


def _has_mallinfo2() -> bool:
    try:
        return hasattr(ctypes.CDLL(None), "mallinfo2")
    except OSError:
        return False


@pytest.mark.skipif(not _has_mallinfo2(), reason="needs glibc 2.33 or newer (mallinfo2 counts the mapped blocks)")
def test_large_blocks_get_pages_of_their_own_once_the_threshold_is_fixed():
    """Before: a 1 MiB block after an 8 MiB one was freed comes from the heap (glibc raised its threshold); after
    own_pages_per_set: it is mapped anew."""
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True", "True"], done.stdout
