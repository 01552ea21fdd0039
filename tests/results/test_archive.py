"""Archives: bundles packed into one .tar.gz and read back by every command that reads bundles, with nothing in an
archive trusted before it is checked (member kinds and names, the manifest's digests, then each bundle)."""

from __future__ import annotations

import io
import json
import tarfile
import tempfile
from pathlib import Path

import pytest

from tests.results.rows import valid_row
from xmfu.harness.results.bundle import archive
from xmfu.harness.results.bundle.writer import BundleWriter


def _bundle(folder: Path, run_id: str, scale: float = 1.0) -> Path:
    writer = BundleWriter(folder / run_id, {"run_id": run_id, "created": "2026-11-25T00:00:00Z", "xmfu_version": "0",
                                            "git_sha": None, "argv": [], "overrides": [], "comparability_key": "k"},
                          "a: 1\n", {"host": {}})
    samples = [scale * 1e-3, scale * 1.1e-3, scale * 0.9e-3]
    writer.append(valid_row(samples, run_id=run_id), {"case_id": "c1", "backend": "torch", "samples": samples,
                                                      "rounds": [0, 0, 0]})
    writer.finalize("complete")
    return folder / run_id


@pytest.fixture
def reference(tmp_path) -> Path:
    """A folder as the GPU reference set leaves it: two bundles, a report and a summary beside them."""
    out = tmp_path / "h100"
    _bundle(out, "run-a")
    _bundle(out, "run-b", scale=0.5)
    (out / "report.html").write_text("<html></html>\n")
    (out / "summary.md").write_text("# summary\n")
    return out


def test_a_folder_packs_with_its_bundles_and_files_and_reads_back_valid(reference, tmp_path):
    packed = archive.pack([reference], tmp_path / "h100.tar.gz", "0.1.0")
    assert (packed.bundles, packed.files) == (2, 2 * 7 + 2)  # a bundle: 6 files and SHA256SUMS; report, summary
    with archive.opened(packed.output) as loaded:
        assert [name for name, _ in loaded] == ["h100/run-a", "h100/run-b"]
        assert all(one.problems == [] and one.bundle.manifest["status"] == "complete" for _, one in loaded)
        folder = loaded[0][1].bundle.folder
        assert (folder.parent / "summary.md").read_text() == "# summary\n"
    assert not folder.exists()  # the temporary folder is gone once the archive is closed
    with tarfile.open(packed.output) as tar:
        names = tar.getnames()
    assert names[0] == archive.MANIFEST_NAME and all(n.startswith("h100/") for n in names[1:])


def test_nothing_is_written_unless_every_bundle_is_valid(reference, tmp_path):
    (reference / "run-b" / "cases.jsonl").write_text("{}\n")
    with pytest.raises(archive.ArchiveError, match="run-b is not a valid bundle"):
        archive.pack([reference], tmp_path / "x.tar.gz", "0")
    assert not list(tmp_path.glob("x.tar.gz*"))


@pytest.mark.parametrize("make", ["link", "not a folder", "no bundle"])
def test_sources_that_cannot_be_packed_are_refused(reference, tmp_path, make):
    if make == "link":
        (reference / "elsewhere").symlink_to("/etc/hostname")
        source, why = reference, "is a link"
    elif make == "not a folder":
        source, why = reference / "summary.md", "is not a folder"
    else:
        (tmp_path / "empty").mkdir()
        source, why = tmp_path / "empty", "holds no bundle"
    with pytest.raises(archive.ArchiveError, match=why):
        archive.pack([source], tmp_path / "x.tar.gz", "0")


def _rewrite(packed: Path, change) -> Path:
    """The archive's members, passed through `change(name, data) -> [(TarInfo, data)]`, written to a new file."""
    out = packed.with_name("changed.tar.gz")
    with tarfile.open(packed) as src, tarfile.open(out, "w:gz") as dst:
        for info in src:
            data = src.extractfile(info).read() if info.isfile() else b""
            for new, new_data in change(info, data):
                dst.addfile(new, io.BytesIO(new_data) if new.isfile() else None)
    return out


def _member(name: str, data: bytes = b"x", kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, len(data) if kind == tarfile.REGTYPE else 0, target
    return info


ATTACKS = {
    "a link": lambda info, data: [(info, data), (_member("h100/run-a/evil", kind=tarfile.SYMTYPE,
                                                          target="/etc/passwd"), b"")],
    "a device": lambda info, data: [(info, data), (_member("h100/dev", kind=tarfile.CHRTYPE), b"")],
    "an absolute path": lambda info, data: [(info, data), (_member("/tmp/xmfu-escape"), b"x")],
    "a path out of the archive": lambda info, data: [(info, data), (_member("h100/../../escape"), b"x")],
    "a file not listed": lambda info, data: [(info, data), (_member("h100/extra.txt"), b"x")],
    "a changed file": lambda info, data: [(_member(info.name, b"# forged\n"), b"# forged\n")
                                          if info.name == "h100/summary.md" else (info, data)],
    "no manifest": lambda info, data: [] if info.name == archive.MANIFEST_NAME else [(info, data)],
}
WHY = {"a link": "not a regular file", "a device": "not a regular file", "an absolute path": "not a plain relative",
       "a path out of the archive": "not a plain relative", "a file not listed": "does not list",
       "a changed file": "checksum mismatch", "no manifest": "not an xmfu archive"}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_an_archive_is_checked_before_anything_in_it_is_used(reference, tmp_path, attack, monkeypatch):
    packed = archive.pack([reference], tmp_path / "h100.tar.gz", "0").output
    bad = _rewrite(packed, ATTACKS[attack])
    # the extraction's temporary folder made in a folder of this test's own: the machine's /tmp also holds those of
    # other processes (a second `make test` beside this one made and removed one while this test looked)
    own = tmp_path / "tmp"
    own.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(own))
    with pytest.raises(archive.ArchiveError, match=WHY[attack]), archive.opened(bad):
        pass
    assert not Path("/tmp/xmfu-escape").exists() and not (tmp_path.parent / "escape").exists()
    assert not list(own.iterdir())  # nothing left behind


def test_a_file_that_is_not_a_tar_gz_is_refused(tmp_path):
    fake = tmp_path / "x.tar.gz"
    fake.write_bytes(b"not gzip")
    with pytest.raises(archive.ArchiveError, match=r"not a readable \.tar\.gz"), archive.opened(fake):
        pass


def test_every_command_that_reads_bundles_reads_an_archive(reference, tmp_path, cli):
    made = cli("archive", str(reference), "-o", str(tmp_path / "h100.tar.gz"))
    assert made.returncode == 0 and "2 bundles" in made.stdout, made.stderr
    packed = str(tmp_path / "h100.tar.gz")
    valid = cli("validate", packed)
    assert valid.returncode == 0 and valid.stdout.count(": valid") == 2 and f"{packed}:h100/run-a" in valid.stdout
    assert cli("report", packed, "-o", str(tmp_path / "r.html")).returncode == 0
    assert "2 rows" in cli("export", packed, "-o", str(tmp_path / "rows.csv")).stdout
    compared = cli("compare", str(reference / "run-a"), packed, "--format", "json")
    assert compared.returncode == 0, compared.stderr
    pytest.importorskip("pyarrow", exc_type=ImportError)  # pyarrow 2x on numpy 1.x raises ImportError
    added = cli("history", "add", packed, "--store", str(tmp_path / "store"))
    assert added.returncode == 0 and "run-a: added" in added.stdout and "run-b: added" in added.stdout


def test_bad_archive_input_is_one_paragraph_and_exit_2(reference, tmp_path, cli):
    wrong_suffix = cli("archive", str(reference), "-o", str(tmp_path / "h100.zip"))
    assert wrong_suffix.returncode == 2 and "must end in .tar.gz" in wrong_suffix.stderr
    no_bundle = cli("archive", str(tmp_path), "-o", str(tmp_path / "x.tar.gz"))  # tmp_path holds h100/: fine
    assert no_bundle.returncode == 0
    fake = tmp_path / "fake.tar.gz"
    fake.write_bytes(b"not gzip")
    for command in (["report", str(fake), "-o", str(tmp_path / "r.html")], ["export", str(fake), "-o",
                                                                            str(tmp_path / "r.csv")]):
        result = cli(*command)
        assert result.returncode == 2 and "is not a sound archive" in result.stderr and "Traceback" not in result.stderr
    checked = cli("validate", str(fake))
    assert checked.returncode == 1 and "not a readable .tar.gz" in checked.stdout
    with tarfile.open(tmp_path / "x.tar.gz") as tar:
        manifest = json.loads(tar.extractfile(archive.MANIFEST_NAME).read())
    assert manifest["bundles"] == [f"{tmp_path.name}/h100/run-a", f"{tmp_path.name}/h100/run-b"]
