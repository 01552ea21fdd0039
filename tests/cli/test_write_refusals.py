"""Commands that write where they cannot (issue 42 item 13): `history add` into a read-only store, `import
--results-dir` a file or a read-only folder, `sign` and `archive -o` on a read-only filesystem, and `import` of
the same log twice in one second. Each is one paragraph (exit 2 where the input names a place that cannot be
written, exit 1 where a write failed), never a traceback, and nothing is left half-made."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from tests.results.rows import MANIFEST, valid_row
from xmfu.harness.cli import common
from xmfu.harness.cli.main import main
from xmfu.harness.results.bundle import archive, imported
from xmfu.harness.results.bundle.validator import load_bundle
from xmfu.harness.results.bundle.writer import BundleWriter

LOGS = Path(__file__).resolve().parents[1] / "results" / "importers" / "logs"
MAMF = LOGS / "mamf-finder_gfx1151_2025.txt"
READ_ONLY = "/proc/sys"  # a folder nobody may write in, root included (access(2) says so)
needs_read_only = pytest.mark.skipif(os.access(READ_ONLY, os.W_OK), reason=f"{READ_ONLY} is writable here")


def _bundle(folder: Path) -> str:
    writer = BundleWriter(folder, {**MANIFEST, "run_id": folder.name}, "", {})
    writer.append(valid_row(run_id=folder.name, case_id="matmul-fp32-16", workload="matmul"),
                  {"case_id": "matmul-fp32-16", "backend": "torch", "samples": [1e-3, 1.1e-3, 0.9e-3]})
    writer.finalize("complete")
    return str(folder)


def _one_paragraph(capsys, code: int, status: int, *words: str) -> str:
    err = capsys.readouterr().err.strip()
    assert code == status, err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert all(w in err for w in words), err
    return err


def _read_only(monkeypatch, folder: Path) -> None:
    """`folder` as a read-only filesystem shows it: access(2) says no (EROFS), and a write there fails with EROFS."""
    real = os.access

    def access(path, mode, *args, **kwargs):
        if Path(path).absolute() == folder.absolute() and mode & os.W_OK:
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


@needs_read_only
def test_history_add_into_a_read_only_store_is_refused(tmp_path, capsys):
    code = main(["history", "add", _bundle(tmp_path / "a"), "--store", f"{READ_ONLY}/store"])
    _one_paragraph(capsys, code, 2, "--store /proc/sys/store", "cannot be written in")


def test_history_add_into_a_store_that_fails_to_be_made_exits_1(tmp_path, capsys, monkeypatch):
    from xmfu.harness.results.history import parquet

    def read_only_now(store):
        raise OSError(errno.EROFS, "Read-only file system", str(store / ".lock"))

    monkeypatch.setattr(parquet, "upgrade", read_only_now)
    code = main(["history", "add", _bundle(tmp_path / "a"), "--store", str(tmp_path / "store")])
    _one_paragraph(capsys, code, 1, "cannot be written (Read-only file system); nothing was added")


def test_import_into_a_results_dir_that_is_a_file_is_refused(tmp_path, capsys):
    (tmp_path / "a-file").write_text("x")
    code = main(["import", "mamf-finder", str(MAMF), "--results-dir", str(tmp_path / "a-file")])
    _one_paragraph(capsys, code, 2, "--results-dir", "a-file is a file")


@needs_read_only
def test_import_into_a_read_only_results_dir_is_refused(tmp_path, capsys):
    code = main(["import", "mamf-finder", str(MAMF), "--results-dir", f"{READ_ONLY}/results"])
    _one_paragraph(capsys, code, 2, "cannot be written in")


def test_import_whose_write_fails_exits_1_and_leaves_no_bundle(tmp_path, capsys, monkeypatch):
    def full_disk(self, records):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(BundleWriter, "append_many", full_disk)
    code = main(["import", "mamf-finder", str(MAMF), "--results-dir", str(tmp_path / "out")])
    _one_paragraph(capsys, code, 1, "could not be written", "No space left on device", "nothing was written")
    assert list((tmp_path / "out").iterdir()) == []


def test_the_same_log_imported_twice_in_one_second_gives_two_bundles(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(imported, "utc_now", lambda: "2026-12-01T10:00:00.000000Z")
    for _ in range(2):
        assert main(["import", "mamf-finder", str(MAMF), "--results-dir", str(tmp_path)]) == 0, capsys.readouterr()
    folders = sorted(p.name for p in tmp_path.iterdir())
    assert folders == ["mamf-finder-mamf-finder_gfx1151_2025-20261201T100000",
                       "mamf-finder-mamf-finder_gfx1151_2025-20261201T100000-2"]
    assert json.loads((tmp_path / folders[1] / "manifest.json").read_text())["run_id"] == folders[1]
    assert load_bundle(tmp_path / folders[1]).problems == []


def test_sign_on_a_read_only_filesystem_is_refused(tmp_path, capsys, monkeypatch):
    bundle = _bundle(tmp_path / "a")
    key = tmp_path / "key"
    key.write_text("not used: the folder is refused first")
    _read_only(monkeypatch, Path(bundle))
    code = main(["sign", bundle, "--key", str(key)])
    _one_paragraph(capsys, code, 2, "cannot be written in", "SHA256SUMS.sig is written in the bundle's folder")


def test_a_signature_that_cannot_be_written_is_one_paragraph(tmp_path, monkeypatch):
    from xmfu.harness.cli import sign

    class Done:
        returncode, stdout, stderr = 0, b"-----BEGIN SSH SIGNATURE-----\n", b""

    monkeypatch.setattr(sign, "_ssh_keygen", lambda: "ssh-keygen")
    monkeypatch.setattr(sign.subprocess, "run", lambda *a, **k: Done())

    def read_only(self, data):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "write_bytes", read_only)
    said = sign.sign(Path(_bundle(tmp_path / "a")), tmp_path / "key")
    assert said is not None and "Read-only file system" in said and "not signed" in said
    assert not list((tmp_path / "a").glob(".*tmp"))


def test_archive_into_a_read_only_folder_is_refused(tmp_path, capsys, monkeypatch):
    bundle = _bundle(tmp_path / "a")
    (tmp_path / "out").mkdir()
    _read_only(monkeypatch, tmp_path / "out")
    code = main(["archive", bundle, "-o", str(tmp_path / "out" / "a.tar.gz")])
    _one_paragraph(capsys, code, 2, "cannot be written in")


def test_an_archive_write_that_fails_on_a_read_only_filesystem_is_an_archive_error(tmp_path, monkeypatch):
    """There even removing the temporary file that was never made fails (EROFS, not ENOENT)."""
    bundle = _bundle(tmp_path / "a")

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(archive.tarfile, "open", read_only)
    monkeypatch.setattr(Path, "unlink", read_only)
    with pytest.raises(archive.ArchiveError, match="Read-only file system"):
        archive.pack([bundle], tmp_path / "a.tar.gz", "0")


def test_writable_folder_names_the_folder_that_would_hold_a_missing_one(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(common.UsageFailure, match=r"is a file"):
        common.writable_folder("cmd", "--dir", str(tmp_path / "f" / "sub"))
    assert common.writable_folder("cmd", "--dir", str(tmp_path / "new" / "sub")) == tmp_path / "new" / "sub"
