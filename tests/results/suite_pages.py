"""What the tests of a suite's verdict page share: plots switched off (they take seconds, and test_verdict's tests
draw them), and a node's record written as the suite writes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def no_plots(monkeypatch: Any) -> None:
    from xmfu.harness.results.render import report
    from xmfu.harness.suites import suite_report

    for module, name in ((report.report_plots, "mfu"), (report.report_plots, "throughput"),
                         (report.report_plots, "busbw"), (report.roofline, "roofline"),
                         (report.telemetry_plot, "telemetry"), (report.inference_plot, "inference")):
        monkeypatch.setattr(module, name, lambda *a, **k: "")
    monkeypatch.setattr(suite_report, "_matmul_figure", lambda *a, **k: None)


def write_node(folder: Path, parts: list[dict[str, Any]]) -> None:
    """node.json of host node-a, full sizes, on a CUDA platform, in an acceptance suite."""
    record = {"host": "node-a", "scale": "full", "scale_reason": "full sizes", "doctor": None, "parts": parts,
              "started": "2026-11-24T00:00:00Z", "finished": "2026-11-24T01:00:00Z",
              "platform": {"kind": "cuda", "reason": "test", "devices": []},
              "suite": {"name": "acceptance", "version": 1, "definition_sha": "d", "suite_id": "s"}}
    (folder / "node.json").write_text(json.dumps(record))
