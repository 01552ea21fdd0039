"""A bundle folder appears whole or not at all: a disk that fills while it is being created leaves no half-written
folder behind (issue 26, item 2: a tmpfs of 8-16 KB left an invalid folder)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xmfu.harness.results.bundle.validator import validate_bundle
from xmfu.harness.results.bundle.writer import BundleWriter

CHECKOUT = Path(__file__).resolve().parents[2]
MANIFEST = {"run_id": "r", "created": "2026-11-25T00:00:00.000000Z", "xmfu_version": "0", "git_sha": None,
            "argv": [], "overrides": [],
            "comparability_key": "k"}
# Per-file size limits (RLIMIT_FSIZE, as the full-disk end-to-end test uses): below the smallest file, inside
# config.yaml, inside environment.json (about 6 KB below), and above every file.
LIMITS = [1, 64, 600, 3000, 5000, 100_000]


def test_a_disk_that_fills_during_creation_leaves_no_folder(tmp_path):
    code = textwrap.dedent(f"""
        import json, resource, signal, sys
        from pathlib import Path
        from xmfu.harness.results.bundle.writer import BundleWriter
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
        env = {{"host": {{"note": "x" * 6000}}}}
        out = {{}}
        for limit in {LIMITS!r}:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
            try:
                BundleWriter(Path({str(tmp_path)!r}) / f"r{{limit}}" / "run", {MANIFEST!r}, "a: 1\\n" * 100, env)
                out[limit] = "created"
            except OSError as exc:
                out[limit] = f"refused: {{exc}}"
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        print(json.dumps(out))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                          cwd=CHECKOUT)  # this checkout's xmfu, not an installed one
    assert done.returncode == 0, done.stderr[-2000:]
    outcomes = json.loads(done.stdout)
    assert outcomes[str(LIMITS[-1])] == "created" and outcomes[str(LIMITS[0])].startswith("refused")
    for limit in LIMITS:
        results = tmp_path / f"r{limit}"
        left = sorted(p.name for p in results.iterdir()) if results.exists() else []
        if outcomes[str(limit)] == "created":
            assert left == ["run"] and validate_bundle(results / "run") == [], limit
        else:
            assert left == [], (limit, outcomes[str(limit)], left)  # no run folder, no temporary one either


def test_an_existing_folder_is_refused_and_left_alone(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "theirs.txt").write_text("keep")
    with pytest.raises(FileExistsError):
        BundleWriter(tmp_path / "run", MANIFEST, "", {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert (tmp_path / "run" / "theirs.txt").read_text() == "keep"


def test_the_folder_appears_with_its_first_consistent_state(tmp_path):
    writer = BundleWriter(tmp_path / "results" / "run", MANIFEST, "a: 1\n", {"host": {}})
    assert writer.folder == tmp_path / "results" / "run"
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["run"]
    assert validate_bundle(writer.folder) == []
    assert json.loads((writer.folder / "manifest.json").read_text())["status"] == "partial"
