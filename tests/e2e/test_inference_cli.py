"""`xmfu run workload=inference experiment=smoke` end to end: prefill and decode rows with their figures."""

from __future__ import annotations

import pytest

from tests.e2e.test_cli import TINY, _bundle_path, xmfu
from xmfu.harness.results.analysis.cost import cost_figures
from xmfu.harness.results.bundle.reader import read_bundle, typed
from xmfu.harness.results.bundle.validator import validate_bundle
from xmfu.harness.results.plots.inference_figures import inference_series

pytestmark = pytest.mark.e2e


@pytest.mark.slow
def test_inference_smoke_run_gives_prefill_and_decode_rows(tmp_path, monkeypatch):
    # torch's OpenMP pool spin-waits by default: beside JAX on two cores its calls ran ~17x slower
    # (docs/reference-measurements.md, "Torch beside JAX on two cores")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    proc = xmfu("run", "workload=inference", "experiment=smoke", "backends=[torch,jax]", "workload.batch=[2]",
                "peak_membw_gbps=50", *TINY, f"results_dir={tmp_path}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    folder = _bundle_path(proc.stdout)
    assert validate_bundle(folder) == []
    rows = {(r["params"]["phase"], r["backend"]): r for r in read_bundle(folder).raw_rows}
    assert set(rows) == {(p, b) for p in ("prefill", "decode") for b in ("torch", "jax")}
    assert all(r["status"] == "ok" and r["correctness"]["ok"] for r in rows.values()), [r["reason"] for r in
                                                                                        rows.values()]
    for backend in ("torch", "jax"):
        prefill, decode = rows[("prefill", backend)], rows[("decode", backend)]
        assert prefill["case_id"] == "inference-bf16-tiny-prefill-b2-p16" and prefill["mfu"] > 0
        assert prefill["ttft_s"]["p50"] == pytest.approx(prefill["time_s"]["median"])
        assert prefill["throughput"]["prompt_tokens_per_s"] == pytest.approx(2 * 16 / prefill["time_s"]["median"])
        assert prefill["mbu"] is None and "compute-bound" in prefill["mbu_reason"]
        assert decode["timer"]["inner"] == 1 and decode["tpot_s"]["n"] == decode["time_s"]["n"]
        assert decode["tpot_s"]["p50"] <= decode["tpot_s"]["p90"] <= decode["tpot_s"]["p99"]
        assert decode["throughput"]["generated_tokens_per_s"] == pytest.approx(2 / decode["time_s"]["median"])
        assert decode["peak_membw_gbps"] == 50.0 and decode["peak_membw_entry"] == "override"
        assert decode["mbu"] == pytest.approx(decode["bandwidth_gbps"] / 50.0)
        assert decode["kv_cache_bytes"] == 2 * 24 * 256 and decode["peak_memory_bytes"] > 0
        priced = cost_figures(typed(decode), 1.0)
        assert priced["usd_per_million_generated_tokens"] == pytest.approx(
            1e6 / (decode["throughput"]["generated_tokens_per_s"] * 3600))
    assert {s["metric"] for s in inference_series(read_bundle(folder).rows)} == {"decode_tokens_per_s", "mbu"}
