"""benchmarks/aa_test.py run as documented writes its report to a temporary file, not over the tracked
benchmarks/results/aa_test.txt that docs/reference-measurements.md quotes (issue 30)."""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "aa_test.py"
TRACKED = ROOT / "benchmarks" / "results" / "aa_test.txt"


def _module():
    spec = importlib.util.spec_from_file_location("aa_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["aa_test"] = module
    spec.loader.exec_module(module)
    return module


def test_aa_test_leaves_the_tracked_record_alone(tmp_path, monkeypatch, capsys):
    aa_test = _module()
    # the measurements themselves (minutes of runs) are not what is tested: each part gives one line
    monkeypatch.setattr(aa_test, "aa", lambda folder, bundles, repeats: ["A/A: stub"])
    monkeypatch.setattr(aa_test, "ab_in_run", lambda folder, trials: ["A/B in one run: stub"])
    monkeypatch.setattr(aa_test, "ab_across", lambda folder, trials, repeats: ["A/B across: stub"])
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    checkout = tmp_path / "checkout"  # where the script's ROOT points, so a default under it touches no real file
    monkeypatch.setattr(aa_test, "ROOT", checkout)
    monkeypatch.setattr(sys, "argv", ["benchmarks/aa_test.py"])  # as documented: no --out
    before = TRACKED.read_bytes()
    assert aa_test.main() == 0
    assert TRACKED.read_bytes() == before and not checkout.exists()
    written = [p for p in tmp_path.iterdir() if p.name.startswith("xmfu-aa_test-")]
    assert len(written) == 1 and "A/A: stub" in written[0].read_text()
    assert f"report: {written[0]}" in capsys.readouterr().out
    asked = tmp_path / "mine.txt"
    assert aa_test.main(["--out", str(asked)]) == 0 and "A/B across: stub" in asked.read_text()
