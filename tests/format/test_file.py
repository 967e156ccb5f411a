"""format/file.py: memory maps and releasing their pages."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest


def _resident_bytes(path) -> int:
    """Resident bytes of the process's mappings of ``path`` (``Rss`` in /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split()
            if fields and "-" in fields[0] and len(fields) >= 5:
                inside = len(fields) >= 6 and fields[-1] == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists() or not hasattr(mmap, "MADV_DONTNEED"),
                    reason="needs Linux smaps and madvise")
def test_release_file_pages_drops_the_pages_and_keeps_the_values(tmp_path):
    import numpy as np

    from litegpu.format.file import open_source, release_file_pages

    values = np.arange(1 << 20, dtype=np.float32)
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\0" * 4 + values.tobytes())  # 4-byte offset: not page aligned, as converters write
    mapped, _ = open_source(path)
    view = np.frombuffer(mapped, np.float32, count=values.size, offset=4)
    assert float(view.sum(dtype=np.float64)) == float(values.sum(dtype=np.float64))  # fault every page in
    before = _resident_bytes(path)
    released = release_file_pages(view)
    assert released >= values.nbytes - 2 * mmap.PAGESIZE
    assert _resident_bytes(path) <= before - released + mmap.PAGESIZE
    np.testing.assert_array_equal(view, values)  # faulted in again from the file, same bytes


def test_release_file_pages_ignores_memory_that_is_not_a_file_map():
    import numpy as np

    from litegpu.format.file import release_file_pages

    assert release_file_pages(np.ones(1 << 16, np.float32)) == 0
    assert release_file_pages(np.frombuffer(bytearray(1 << 16), np.uint8)) == 0


def test_a_written_model_gets_the_permissions_of_any_new_file(tmp_path):
    """Not mkstemp's 0600: a model written for a colleague is readable by them where the umask says so."""
    import stat

    from litegpu.ir.builder import ModelBuilder
    from litegpu.ir.save import write_model

    b = ModelBuilder()
    x, y = b.input("x", (1,)), b.tensor("y", (1,))
    b.op("RELU", [x], [y])
    b.output(y)
    for umask, mode in ((0o022, 0o644), (0o077, 0o600)):
        old = os.umask(umask)
        try:
            write_model(b.build(), tmp_path / f"m{umask}.tflite")
        finally:
            os.umask(old)
        assert stat.S_IMODE((tmp_path / f"m{umask}.tflite").stat().st_mode) == mode
    assert not list(tmp_path.glob(".*.tmp"))
