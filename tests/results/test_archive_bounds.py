"""An archive is read within bounds (issue 42 item 14): a compression bomb is refused on its members' declared
sizes before anything is unpacked (a 3 GiB one took `compare` to 3.2 GB of memory), and a member is copied out a
piece at a time, never held whole. Bounds are monkeypatched small: no test writes gigabytes."""

from __future__ import annotations

import os
import tracemalloc

import pytest

from tests.results.test_archive import _member, _rewrite, reference  # noqa: F401 (a fixture)
from xmfu.harness.results.bundle import archive


def test_a_compression_bomb_is_refused_before_it_is_unpacked(reference, tmp_path, monkeypatch, cli):  # noqa: F811
    monkeypatch.setattr(archive, "RATIO_FLOOR_BYTES", 2**20, raising=False)
    packed = archive.pack([reference], tmp_path / "h100.tar.gz", "0").output
    zeros = bytes(8 * 2**20)  # 8 MiB of zeros pack into a few KiB: far over 100 times the archive's size
    bomb = _rewrite(packed, lambda info, data: [(info, data)] + ([(_member("h100/zeros", zeros), zeros)]
                                                                 if info.name == "h100/summary.md" else []))
    assert os.path.getsize(bomb) < 100_000
    copied = []
    monkeypatch.setattr(archive, "_copied", lambda source, target: copied.append(target) or b"")
    with pytest.raises(archive.ArchiveError, match="compression bomb"), archive.opened(bomb):
        pass
    assert not [t for t in copied if t.name == "zeros"]  # refused on its declared size, never unpacked
    monkeypatch.undo()
    monkeypatch.setattr(archive, "RATIO_FLOOR_BYTES", 2**20, raising=False)
    result = cli("compare", str(bomb), str(bomb))
    assert result.returncode == 2 and "compression bomb" in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_a_member_is_copied_out_a_piece_at_a_time(reference, tmp_path, monkeypatch):  # noqa: F811
    (reference / "trace.bin").write_bytes(os.urandom(8 * 2**20))  # incompressible: within every bound
    packed = archive.pack([reference], tmp_path / "h100.tar.gz", "0").output
    monkeypatch.setattr(archive, "COPY_BYTES", 64 * 1024, raising=False)
    tracemalloc.start()
    try:
        with archive.opened(packed) as loaded:
            _, peak = tracemalloc.get_traced_memory()
            assert all(one.problems == [] for _, one in loaded)
            assert (loaded[0][1].bundle.folder.parent / "trace.bin").stat().st_size == 8 * 2**20
    finally:
        tracemalloc.stop()
    assert peak < 3 * 2**20, peak
