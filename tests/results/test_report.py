"""The HTML report: escaped, self-contained, and checked in a real headless Chromium."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess

import pytest

from harness.results import report
from harness.results.reader import read_bundle
from tests.results.test_compare import _bundle

HOSTILE = "<script>alert('x')</script>"


def _report(tmp_path):
    bundle = _bundle(tmp_path, "r1", 0.002)
    rows = bundle.cases
    rows[0]["reason"] = HOSTILE  # an error text that tries to run
    rows.append({**rows[0], "case_id": "c2", "status": "failed", "reason": HOSTILE, "time_s": None, "mfu": None})
    env = {"host": {"hostname": HOSTILE}, "driver": "570"}
    telemetry = {"r1": [{"t": 0.0, "sm_clock_mhz": 1980.0, "power_w": 600.0},
                        {"t": 1.0, "sm_clock_mhz": 1900.0, "power_w": 690.0}]}
    return report.build([bundle], [env], telemetry), bundle


def test_everything_shown_is_escaped_and_self_contained(tmp_path):
    html, _ = _report(tmp_path)
    assert "<script" not in html and "&lt;script&gt;" in html
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html
    assert html.count("<svg") >= 5  # MFU, size, busbw, roofline, clock and power charts


def _chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and os.environ.get("XMFU_REQUIRE_CHROMIUM") == "1":
        pytest.fail("chromium is required here (CI installs Debian's chromium)")
    return found


def test_report_renders_in_headless_chromium(tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (CI installs it and requires this test)")
    html, bundle = _report(tmp_path)
    page = tmp_path / "report.html"
    page.write_text(html)
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-quic",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0"]
    shot = tmp_path / "shot.png"
    proc = subprocess.run([*flags, "--window-size=1200,2000", f"--screenshot={shot}", page.as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert shot.exists(), proc.stderr[-2000:]
    width, height = struct.unpack(">II", shot.read_bytes()[16:24])
    assert (width, height) == (1200, 2000) and shot.stat().st_size > 20_000  # plots drawn, not a blank page
    assert "CONSOLE" not in proc.stderr  # no console messages, let alone errors
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    row = read_bundle(bundle.folder).cases[0]
    assert f"{100 * row['mfu']:.1f}%" in dom and row["run_id"] in dom  # the figures are the bundle's
    assert "&lt;script&gt;" in dom and "<script" not in dom.split("<body", 1)[1]


def test_roofline_draws_the_device_roofs(tmp_path):
    bundle = _bundle(tmp_path, "gpu", 0.002)
    bundle.cases[0].update(peak_entry="nvidia-h100-sxm", peak_tflops=989.0, bytes=3e9, device="NVIDIA H100")
    html = report.build([bundle], [{}], {})
    assert "roof: NVIDIA H100" in html and "No roof drawn" not in html
