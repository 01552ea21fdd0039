"""The HTML report: matplotlib plots embedded as inline SVG, escaped, self-contained, and checked in a real
headless Chromium (the page and the trend page, each rendered once)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET

import pytest
from msgspec import structs

from tests.results.rows import attention_row, collectives_row, matmul_row, untimed_row, write_bundle
from xmfu.harness.results.bundle.reader import read_bundle, typed
from xmfu.harness.results.render import report

HOSTILE = "<script>alert('x')</script>"
SVG_NS = "{http://www.w3.org/2000/svg}"
# What may appear in the report's SVG: matplotlib's drawing vocabulary, nothing that runs or loads.
SVG_TAGS = {"svg", "defs", "style", "g", "path", "text", "use", "clipPath", "rect", "tspan", "title"}


def _rows():
    rows = [matmul_row(s, s, s) for s in (256, 512, 1024)]
    rows += [matmul_row(1024, 1024, 1024, backend=HOSTILE)]  # a label that tries to become markup
    rows += [matmul_row(512, 512, 512, backend="_b$x$")]  # mathtext, and a legend entry matplotlib would hide
    rows += [attention_row(512, causal, mode) for causal in (False, True) for mode in ("fwd", "fwd_bwd")]
    rows += [collectives_row(size) for size in (1024, 65536, 2**20)]
    interpreted = {**attention_row(512, True, "fwd", backend="triton"), "timing_valid": False, "mfu": None,
                   "timing_note": "Triton interpreter on a CPU"}
    rows += [interpreted, untimed_row("failed", case_id="c2", reason=HOSTILE, platform="cuda",
                                                   device="GPU A")]
    return rows


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(report HTML, bundle): built once for the tests that read it (matplotlib takes a few seconds)."""
    telemetry = [{"t": 10.0 + i, "sm_clock_mhz": 1980.0 - 10 * i, "power_w": 600.0 + 5 * i} for i in range(5)]
    bundle = write_bundle(tmp_path_factory.mktemp("report"), "r1", _rows(), telemetry=telemetry)
    env = {"host": {"hostname": HOSTILE}, "driver": "570"}
    return report.build([bundle], [env], {"r1": bundle.telemetry()}), bundle


def _svgs(html):
    return re.findall(r"<svg.*?</svg>", html, flags=re.S)


def test_everything_shown_is_escaped_and_self_contained(built):
    html, _ = built
    assert "<script" not in html and "&lt;script&gt;" in html
    # No address but XML namespace names (identifiers, never fetched); no script, no external resource.
    assert not re.findall(r"https?://(?!www\.w3\.org/)", html) and "<link" not in html and "<img" not in html
    svgs = _svgs(html)
    assert len(svgs) >= 6  # MFU (2 workloads), TFLOP/s against size (2), busbw, roofline, clocks and power
    for svg in svgs:
        root = ET.fromstring(svg)  # well-formed: no label closed a tag or opened one
        tags = {el.tag.removeprefix(SVG_NS) for el in root.iter()}
        assert tags <= SVG_TAGS, tags - SVG_TAGS
        assert not [a for el in root.iter() for a in el.attrib if a.lower().startswith("on")]
    texts = [el.text or "" for svg in svgs for el in ET.fromstring(svg).iter(f"{SVG_NS}text")]
    assert any("<script>" in t for t in texts)  # the hostile backend is drawn as the text it is
    assert any("_b$x$" in t for t in texts)  # as typed, in the legend too
    assert len(set(re.findall(r'id="([^"]+)"', "".join(svgs)))) == len(re.findall(r'id="([^"]+)"', "".join(svgs)))


def test_plots_say_what_they_show(built):
    html, _ = built
    texts = " ".join(el.text or "" for svg in _svgs(html) for el in ET.fromstring(svg).iter(f"{SVG_NS}text"))
    for label in ("non-causal fwd", "causal fwd_bwd", "achieved TFLOP/s (95% CI)", "FLOPs per call",
                  "bus bandwidth GB/s", "1 KiB", "1 MiB", "SM clock (MHz)", "power (W)",
                  "compute roof: bf16 100 TFLOP/s on GPU A"):
        assert label in texts, label
    assert "2.08e+04" not in texts and "days" not in texts
    assert "1 ok rows are not drawn: their timing is not valid here" in html


def test_a_timing_invalid_row_shows_no_throughput_as_in_the_cli(built):
    html, bundle = built
    row = next(r for r in bundle.rows if r.backend == "triton")
    assert row.tflops is not None  # the bundle has a figure; it does not represent the hardware
    cells = re.search(r"<tr class=flagged>(<td>r1</td><td>attention</td><td>triton</td>.*?)</tr>", html).group(1)
    assert f"{row.tflops:.4g}" not in cells and "timing not valid here: Triton interpreter on a CPU" in cells
    assert "<td>ok</td><td>timing not valid</td>" in cells  # its flag beside its status (issue 30, item 7)


def test_labels_are_never_cut_silently(tmp_path):
    rows = [matmul_row(m, n, k) for m in (256, 512, 1024, 2048) for n in (256, 512, 1024, 2048)
            for k in (256, 512, 1024, 2048, 4096)]  # 80 bars, 16 series of 5 sizes
    html = report.build([write_bundle(tmp_path, "grid", rows)], [{}], {})
    assert "showing 60 of 80 rows" in html and "showing 20 of" not in html
    texts = [el.text for svg in _svgs(html) for el in ET.fromstring(svg).iter(f"{SVG_NS}text")]
    assert "m=256 n=256 k=256" in texts and "m=256 n=256" in texts  # a bar, and a series along k


def test_roofs_memory_where_known_compute_where_only_that_is(tmp_path):
    gpu = {**matmul_row(1024, 1024, 1024), "peak_entry": "nvidia-h100-sxm", "device": "NVIDIA H100"}
    cpu = {**matmul_row(512, 512, 512), "peak_entry": "cpu-estimate", "device": "AMD EPYC", "platform": "cpu"}
    html = report.build([write_bundle(tmp_path, "gpu", [gpu, cpu])], [{}], {})
    # a legend entry longer than a line wraps between words (one <text> per line): read them joined
    texts = " ".join(el.text or "" for svg in _svgs(html) for el in ET.fromstring(svg).iter(f"{SVG_NS}text"))
    assert "compute and memory roof: bf16 100 TFLOP/s on NVIDIA H100" in texts
    assert "compute roof: bf16 100 TFLOP/s on AMD EPYC (CPU estimate)" in texts
    assert "Memory roof not drawn for AMD EPYC" in html


def test_a_cpu_clock_is_labelled_as_one(tmp_path):
    row = {**matmul_row(256, 256, 256), "platform": "cpu", "device": "AMD EPYC"}
    readings = [{"t": float(i), "sm_clock_mhz": 2600.0, "energy_j": 100.0 + 30 * i} for i in range(4)]
    bundle = write_bundle(tmp_path, "cpu", [row], telemetry=readings)
    html = report.build([bundle], [{}], {"cpu": bundle.telemetry()})
    assert "CPU clock, mean of cores (MHz)" in html and "power from energy counter (W)" in html
    assert "SM clock" not in html


def _chromium() -> str | None:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and os.environ.get("XMFU_REQUIRE_CHROMIUM") == "1":
        pytest.fail("chromium is required here (CI installs Debian's chromium)")
    return found


def render(page, tmp_path, size=(1200, 2000)):
    """(PNG path, DOM as the browser parsed it, stderr): one headless Chromium run."""
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (CI installs it and requires this test)")
    shot = tmp_path / f"{page.stem}.png"
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-quic",
             "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
             f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
             f"--window-size={size[0]},{size[1]}", f"--screenshot={shot}", "--dump-dom", page.as_uri()]
    proc = subprocess.run(flags, capture_output=True, text=True, timeout=120)
    assert shot.exists(), proc.stderr[-2000:]
    return shot, proc.stdout, proc.stderr


def ink(png) -> tuple[float, int]:
    """(share of pixels that are not near-white, count of saturated pixels: plot lines and bars, not text)."""
    from matplotlib.image import imread

    pixels = imread(png)[..., :3]  # floats 0..1, Pillow decodes the PNG
    spread = pixels.max(axis=2) - pixels.min(axis=2)
    return float((pixels.min(axis=2) < 0.85).mean()), int((spread > 0.3).sum())


def test_report_renders_in_headless_chromium(built, tmp_path):
    html, bundle = built
    page = tmp_path / "report.html"
    page.write_text(html)
    shot, dom, stderr = render(page, tmp_path)
    assert ink(shot)[0] > 0.03 and ink(shot)[1] > 3000  # tables and plots drawn, not a blank page
    assert "CONSOLE" not in stderr  # no console messages, let alone errors
    row = read_bundle(bundle.folder).rows[0]
    assert f"{100 * row.mfu:.1f}%" in dom and row.run_id in dom  # the figures are the bundle's
    assert "&lt;script&gt;" in dom and "<script" not in dom.split("<body", 1)[1]


def _nightly_rows():
    """Eight nights of two devices, and one run on a third night with another comparability key: stored rows, as
    the history store gives them."""
    from xmfu.harness.results.history.parquet import when
    from xmfu.harness.results.history.stored import Stored

    rows = []
    for night in range(8):
        for platform, device, tflops in (("cuda", "NVIDIA H100", 700.0), ("rocm", "AMD MI300X", 560.0)):
            rows.append(Stored(run_id=f"{platform}{night}", created=when(f"2026-11-{night + 1:02d}T02:00:00Z"),
                               workload="matmul", case_id="matmul-bf16-8192x8192x8192-NN", backend="torch",
                               device=device, platform=platform, dtype="bf16", status="ok", timing_valid=True,
                               comparability_key="k",
                               tflops=tflops * (1 + 0.01 * (night % 3)) + (25 * night if platform == "rocm" else 0)))
    rows.append(structs.replace(rows[4], run_id="override", comparability_key="k2", tflops=300.0))
    return rows


def test_trend_page_renders_in_headless_chromium(tmp_path):
    from xmfu.harness.results.history import judge, trend

    rows = _nightly_rows()
    found = judge.series(rows, "tflops")
    assert len(found) == 3  # the run with another comparability key is a line of its own
    fig = trend.figure(trend.series_groups(found), "tflops over time", trend.METRIC_LABELS["tflops"])
    page = tmp_path / "trend.html"
    page.write_text(trend.html_page(fig, "tflops over time", *trend.series_table(trend.series_groups(found))))
    shot, dom, stderr = render(page, tmp_path, size=(1200, 800))
    share, saturated = ink(shot)
    assert share > 0.02 and saturated > 1500 and "CONSOLE" not in stderr
    assert "date of the run (UTC)" in dom and "[key k2]" in dom


CONTENDED = {"contended": True, "reason": "pid 9 (stress) used 97% of a core", "busiest_others": [],
             "load_avg": [1.0, 1.0, 1.0]}


def test_a_row_shows_its_flags_in_the_table_and_beside_its_bar():
    """A contended, CI-missed row carries both flags wherever its figure is: the every-row table (and its row is
    marked) and its MFU bar's label, with a note under the plot counting the flagged rows (issue 30, item 7)."""
    from xmfu.harness.results.plots import report_plots

    flagged = typed(matmul_row(512, 512, 512, contention=CONTENDED, timer={"ci_target_met": False, "stop": "budget"}))
    clean = typed(matmul_row(256, 256, 256))
    table = report._table([clean, flagged])
    assert "<th>flags</th>" in table and "<td>contended, CI missed</td>" in table
    assert table.count("<tr class=flagged>") == 1
    html = report_plots.mfu([clean, flagged])
    texts = [el.text or "" for svg in _svgs(html) for el in ET.fromstring(svg).iter(f"{SVG_NS}text")]
    assert "50.0% [contended, CI missed]" in texts and "50.0%" in texts
    assert "1 of 2 rows flagged: contended 1, CI missed 1" in html


def test_the_page_opens_with_a_table_of_contents_linking_every_section(built):
    """The reports ran to 300-700 KB with no table of contents (issue 42 item 12)."""
    built, _ = built
    contents = re.search(r"<nav class='contents'><b>Contents</b><ol>(.*?)</ol></nav>", built)
    assert contents and built.index("<nav class='contents'>") < built.index("<h2 ")
    links = re.findall(r"<li><a href='#([\w-]+)'>([^<]+)</a></li>", contents.group(1))
    headings = re.findall(r"<h2 id='([\w-]+)'>([^<]+)</h2>", built)
    assert links == headings and [t for _, t in links][:2] == ["Runs", "What runs on day one"]
    assert ("section-11", "Environments") in links
