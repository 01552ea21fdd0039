"""Issue 26, "forgeries that pass `xmfu validate`": real bundles (a matmul run with a speedup against its baseline,
a collectives run) edited consistently, checksums recomputed, each refused by `xmfu validate` with the problem
named; and `xmfu sign` / `xmfu validate --verify-signature` (OpenSSH's ssh-keygen -Y)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import SECOND_MATMUL
from xmfu.harness.cli.formulas import restate_rows, restate_run
from xmfu.harness.results.bundle.validator import load_bundle
from xmfu.harness.results.schema.comparability import comparability_key

MATMUL = ["workload=matmul", "workload.sizes=[32]", f"backends=[torch,{SECOND_MATMUL}]", "baseline=torch",
          "timing=quick"]
COLLECTIVES = ["workload=collectives", "workload.sizes=[1024]", "workload.ops=[all_reduce]", "workload.samples=5"]
INFERENCE = ["workload=inference", "experiment=smoke", "backends=[torch]", "workload.batch=[2]",
             "workload.phases=[decode]", "peak_membw_gbps=50", "timing=quick", "timing.max_time_s=0.2",
             "timing.warmup_s=0"]
# one call per sample (timing.max_inner=1), as the warm-up calls are timed: where the warm-up check applies
SINGLE = ["workload=matmul", "workload.sizes=[32]", "backends=[torch]", "timing=quick", "timing.max_inner=1"]
SUSTAINED = ["workload=matmul", "workload.sizes=[32]", "backends=[torch]", "timing=sustained",
             "timing.sustain_s=0.3", "timing.window_s=0.1", "timing.warmup_s=0"]


def _run(tmp: Path, overrides: list[str]) -> Path:
    from xmfu.harness.cli.main import main

    assert main(["run", *overrides, f"results_dir={tmp}"]) == 0
    (bundle,) = [p for p in tmp.iterdir() if p.is_dir()]
    return bundle


def _variants_run(tmp: Path) -> Path:
    """A bundle whose rows carry variants timed beside the step, written by the engine (as a distributed
    training step's no_comm and comm_alone are), without a multi-process run."""
    from tests.engine.test_runner_hooks import _run as run_with_variants

    run_with_variants(tmp)
    return tmp / "b"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    made = {name: _run(tmp_path_factory.mktemp(name), o) for name, o in (
        ("matmul", MATMUL), ("collectives", COLLECTIVES), ("inference", INFERENCE), ("sustained", SUSTAINED),
        ("single", SINGLE))}
    made["variants"] = _variants_run(tmp_path_factory.mktemp("variants"))
    for bundle in made.values():
        assert load_bundle(bundle, restate_rows, restate_run).problems == []
    return made


def _lines(bundle: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (bundle / name).read_text().splitlines()]


def _write(bundle: Path, name: str, text: str, listed: bool = True) -> None:
    """Change a file and re-make its checksum line (or drop it): what a careful forger does."""
    (bundle / name).write_text(text)
    digest = hashlib.sha256(text.encode()).hexdigest()
    lines = [line for line in (bundle / "SHA256SUMS").read_text().splitlines() if not line.endswith(f"  {name}")]
    if listed:
        lines.append(f"{digest}  {name}")
    (bundle / "SHA256SUMS").write_text("".join(line + "\n" for line in lines))


def _rows(bundle: Path, edit, name: str = "cases.jsonl") -> None:
    records = _lines(bundle, name)
    edit(records)
    _write(bundle, name, "".join(json.dumps(r) + "\n" for r in records))


def _timed(rows: list[dict]) -> dict:
    return next(r for r in rows if r.get("time_s") and r.get("speedup") is None)


def _halve_median(rows):
    r = _timed(rows)
    r["time_s"]["median"] /= 2
    r["tflops"] *= 2
    r["mfu"] *= 2


def _samples_x10(recs):
    for rec in recs:
        rec["samples"] = [v * 10 for v in rec["samples"]]


def _bw_x3(rows):
    r = _timed(rows)
    r["algbw_gbps"] *= 3
    if r.get("busbw_gbps"):
        r["busbw_gbps"] *= 3


def _flip_speedup(rows):
    sp = next(r for r in rows if r.get("speedup"))["speedup"]
    sp["value"], sp["ci95_low"], sp["ci95_high"] = 1 / sp["value"], 1 / sp["ci95_high"], 1 / sp["ci95_low"]
    sp["verdict"] = {"slower": "faster", "faster": "slower"}.get(sp["verdict"], "faster")


def _ok_but_incorrect(rows):
    _timed(rows)["correctness"]["ok"] = False


def _double_flops(rows):
    r = _timed(rows)
    r["flops"] *= 2
    r["tflops"] *= 2
    r["mfu"] *= 2
    r["tflops_ci95"] = [v * 2 for v in r["tflops_ci95"]]


def _n_1000(rows):
    _timed(rows)["time_s"]["n"] = 1000


def _ci_swapped(rows):
    t = _timed(rows)["time_s"]
    t["ci95_low"], t["ci95_high"] = t["ci95_high"], t["ci95_low"]


def _median_above_max(rows):
    r = _timed(rows)
    r["time_s"]["median"] = r["time_s"]["max"] * 2
    r["tflops"] = r["flops"] / r["time_s"]["median"] / 1e12
    r["mfu"] = r["tflops"] / r["peak_tflops"]
    r.pop("tflops_ci95", None)


def _duplicate(bundle: Path) -> None:
    rows, recs = _lines(bundle, "cases.jsonl"), _lines(bundle, "samples.jsonl")
    _write(bundle, "cases.jsonl", "".join(json.dumps(r) + "\n" for r in [*rows, rows[0]]))
    _write(bundle, "samples.jsonl", "".join(json.dumps(r) + "\n" for r in [*recs, recs[0]]))
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["counts"][rows[0]["status"]] += 1
    _write(bundle, "manifest.json", json.dumps(manifest))


def _h100(rows):
    for r in rows:
        r["device"] = "NVIDIA H100 80GB HBM3"


def _peak_989(rows):
    for r in rows:
        if r.get("peak_tflops"):
            r["peak_tflops"] = 989.0
            if r.get("mfu") is not None:
                r["mfu"] = r["tflops"] / 989.0


def _yesterday(bundle: Path) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["created"] = "yesterday"
    _write(bundle, "manifest.json", json.dumps(manifest))


def _telemetry_unlisted(bundle: Path) -> None:
    readings = _lines(bundle, "telemetry.jsonl")
    readings[0]["t"] += 1.0  # one reading moved, and the file's checksum line dropped instead of re-made
    _write(bundle, "telemetry.jsonl", "".join(json.dumps(r) + "\n" for r in readings), listed=False)


def _key_changed(rows):
    for r in rows:
        r["comparability_key"] = "0" * 16  # e.g. to join another run's series in a history store


def _rekeyed(change):
    """Change the comparability fields and re-hash them with the run's own function, as a careful forger would."""
    def edit(rows):
        for r in rows:
            change(r["comparability"])
            r["comparability_key"] = comparability_key(r["comparability"])
    return edit


def _fields_dropped(rows):
    for r in rows:
        r["comparability"] = None
        r["comparability_key"] = "0" * 16


def _variant_median_halved(rows):
    r = next(r for r in rows if r.get("variants"))
    r["variants"]["loud"]["time_s"]["median"] /= 2
    r["comm_total_s"] /= 2  # what the workload derives from it, edited to match


def _variant_samples_x10(recs):
    for rec in recs:
        for v in (rec.get("variants") or {}).values():
            v["samples"] = [x * 10 for x in v["samples"]]


def _decode(rows):
    return next(r for r in rows if r.get("tpot_s"))


def _tpot_halved(rows):
    t = _decode(rows)["tpot_s"]
    for name in ("p50", "p90", "p99", "mean"):
        t[name] /= 2


def _kv_bytes_halved(rows):
    _decode(rows)["kv_cache_bytes"] //= 2


def _mbu_doubled(rows):
    r = _decode(rows)
    r["mbu"] *= 2
    r["peak_membw_gbps"] /= 2


def _steady_window_faster(rows):
    st = rows[0]["steady_state"]
    for w in (*st["windows"], st["first_window"], st["steady_window"]):
        w["median_s"] /= 2
        w["tflops"] *= 2


def _steady_settled_earlier(rows):
    """Settled at the first window; where the run really did (a quiet machine), settled at the last instead: either
    way a result its windows do not give."""
    st = rows[0]["steady_state"]
    if st.get("reached") and st.get("reached_after_s") == 0.0:
        last = st["windows"][-1]
        st["reached_after_s"] = last["start_s"] + 1.0
        st["first_vs_steady_time_change"] = 0.5
        return
    st["reached"], st["reached_after_s"] = True, 0.0
    st["steady_window"] = st["first_window"]
    st["first_vs_steady_time_change"] = 0.0


TIME_FIELDS = ("median", "mean", "min", "max", "p10", "p90", "p99", "ci95_low", "ci95_high")
RATE_FIELDS = ("tflops", "mfu", "bandwidth_gbps")


def _uncontended(bundle: Path) -> None:
    """The rows marked measured alone. The warm-up check passes over a contended row (its warm-up and timed calls met
    different loads), and on a loaded machine the genuine run these tests copy is contended: the forgery is then
    made on rows that claim a quiet host, where the check applies."""
    _rows(bundle, lambda rows: [r["contention"].update(contended=False) for r in rows if r.get("contention")])


def _rescaled(factor: float):
    """The raw samples and every figure made from them scaled alike (times by `factor`, rates by its inverse), the
    warm-up calls beside them left as they were: all that validate re-derives from the samples agrees. The factors
    leave margin for a loaded machine, where a genuine tiny call's timed median reached 11.8x its warm-up's."""
    def edit(bundle: Path) -> None:
        _uncontended(bundle)
        _rows(bundle, _samples_scaled(factor), "samples.jsonl")
        _rows(bundle, _figures_scaled(factor))
    return edit


def _samples_scaled(factor: float):
    def edit(recs):
        for rec in recs:
            rec["samples"] = [v * factor for v in rec["samples"]]
    return edit


def _figures_scaled(factor: float):
    def edit(rows):
        for r in rows:
            if not r.get("time_s"):
                continue
            r["time_s"].update({k: r["time_s"][k] * factor for k in TIME_FIELDS})
            r.update({k: r[k] / factor for k in RATE_FIELDS if r.get(k) is not None})
            r["tflops_ci95"] = [v / factor for v in r["tflops_ci95"]]
            if r.get("contention"):  # claimed quiet: a contended row is not checked against its warm-up
                r["contention"].update(contended=False, reason=None)
    return edit


def _ci_narrowed(bundle: Path) -> None:
    """The median's interval moved one order statistic inward on each side, tflops_ci95 re-made to match."""
    recs = _lines(bundle, "samples.jsonl")

    def edit(rows):
        row = _timed(rows)
        ordered = sorted(next(r for r in recs if r["backend"] == row["backend"])["samples"])
        t = row["time_s"]
        low, high = ordered.index(t["ci95_low"]) + 1, ordered.index(t["ci95_high"]) - 1
        t["ci95_low"], t["ci95_high"] = ordered[low], ordered[high]
        row["tflops_ci95"] = [row["flops"] / t["ci95_high"] / 1e12, row["flops"] / t["ci95_low"] / 1e12]
    _rows(bundle, edit)


def _manifest_key_changed(bundle: Path) -> None:
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["comparability_key"] = "0" * 16  # e.g. to pass for another configuration's run
    _write(bundle, "manifest.json", json.dumps(manifest))


FORGERIES = {  # name: (run, edit of the bundle, words the problem must contain)
    "median halved, TFLOP/s and MFU doubled": ("matmul", lambda b: _rows(b, _halve_median),
                                               "time_s.median"),
    "raw samples x10": ("matmul", lambda b: _rows(b, _samples_x10, "samples.jsonl"), "is not the median of its"),
    "algbw/busbw x3": ("collectives", lambda b: _rows(b, _bw_x3), "algbw_gbps"),
    "speedup and verdict flipped": ("matmul", lambda b: _rows(b, _flip_speedup), "speedup.value"),
    "status ok with correctness.ok false": ("matmul", lambda b: _rows(b, _ok_but_incorrect),
                                            "status ok but correctness.ok is false"),
    "FLOPs doubled against 2MNK": ("matmul", lambda b: _rows(b, _double_flops),
                                   "flops 131072.0 is not what the matmul workload's formula gives"),
    "time_s.n 1000": ("matmul", lambda b: _rows(b, _n_1000), "time_s.n is 1000 but samples.jsonl holds"),
    "ci95_low above ci95_high": ("matmul", lambda b: _rows(b, _ci_swapped), "is above ci95_high"),
    "median above max": ("matmul", lambda b: _rows(b, _median_above_max), "is above time_s.max"),
    "a duplicated row": ("matmul", _duplicate, "repeats line 1"),
    "device renamed to an H100": ("matmul", lambda b: _rows(b, _h100), "is nvidia-h100-sxm in the peak table"),
    "peak set to 989": ("matmul", lambda b: _rows(b, _peak_989), "is not the peak table's"),
    "created: yesterday": ("matmul", _yesterday, "created 'yesterday' is not a UTC ISO 8601 time"),
    "telemetry.jsonl edited, its line dropped": ("matmul", _telemetry_unlisted, "SHA256SUMS does not list "
                                                                                "telemetry.jsonl"),
    "comparability key changed": ("matmul", lambda b: _rows(b, _key_changed),
                                  "is not the hash of the row's comparability fields"),
    "comparability dtype changed, key re-hashed": ("matmul", lambda b: _rows(b, _rekeyed(
        lambda f: f.update(dtype="fp16"))), "comparability.dtype 'fp16' is not the row's dtype"),
    "protocol cold_cache flipped, key re-hashed": ("matmul", lambda b: _rows(b, _rekeyed(
        lambda f: f["protocol"].update(cold_cache=not f["protocol"]["cold_cache"]))),
                                                   "is not the protocol config.yaml's timing settings give"),
    "comparability fields dropped, key changed": ("matmul", lambda b: _rows(b, _fields_dropped),
                                                  "without the comparability fields it is the hash of"),
    "a variant's median halved": ("variants", lambda b: _rows(b, _variant_median_halved),
                                  "variants.loud.time_s.median"),
    "a variant's samples x10": ("variants", lambda b: _rows(b, _variant_samples_x10, "samples.jsonl"),
                                "is not the median of its"),
    "TPOT halved": ("inference", lambda b: _rows(b, _tpot_halved), "tpot_s"),
    "KV-cache bytes halved": ("inference", lambda b: _rows(b, _kv_bytes_halved), "kv_cache_bytes"),
    "MBU doubled against a halved peak": ("inference", lambda b: _rows(b, _mbu_doubled), "peak_membw_gbps"),
    "steady windows twice as fast": ("sustained", lambda b: _rows(b, _steady_window_faster),
                                     "steady_state.windows[0].median_s"),
    "steady state settled at once": ("sustained", lambda b: _rows(b, _steady_settled_earlier),
                                     "is not what its windows give"),
    "manifest comparability_key changed": ("matmul", _manifest_key_changed,
                                           "manifest.json: comparability_key '0000000000000000' is not what "
                                           "config.yaml gives"),
    "rows keyed into a suite's series": ("matmul", lambda b: _rows(b, _rekeyed(
        lambda f: f["protocol"].update(suite="nightly/1/0123456789ab"))), "comparability.protocol.suite"),
    "samples and every figure cut 100-fold, warm-up untouched": ("single", _rescaled(0.01),
                                                                "faster than the fastest of its"),
    "samples and every figure x10, warm-up untouched": ("single", _rescaled(10.0), "the median of its"),
    "median's CI narrowed by one order statistic": ("matmul", _ci_narrowed, "binomial order-statistic bound"),
}


@pytest.mark.parametrize("name", FORGERIES)
def test_each_consistent_forgery_is_refused_with_the_problem_named(runs, tmp_path, cli, name):
    run, forge, needle = FORGERIES[name]
    bundle = tmp_path / "b"
    shutil.copytree(runs[run], bundle)
    forge(bundle)
    result = cli("validate", str(bundle))
    assert result.returncode == 1, result.stdout
    assert needle.lower() in result.stdout.lower(), result.stdout


@pytest.mark.parametrize("factor", [0.01, 10.0])
def test_a_rescaled_bundle_disagrees_with_its_warm_up_alone(runs, tmp_path, factor):
    """The rescaling forgery is consistent in everything re-derived from the samples (it passed before issue 42
    item 17): only the warm-up calls it left untouched give it away."""
    bundle = tmp_path / "b"
    shutil.copytree(runs["single"], bundle)
    _uncontended(bundle)
    if load_bundle(bundle, restate_rows, restate_run).problems:  # the load alone moved its warm-up that far
        pytest.skip("this machine's load made the genuine run's warm-up and timed calls disagree past the bounds")
    _rescaled(factor)(bundle)
    problems = load_bundle(bundle, restate_rows, restate_run).problems
    assert problems and all("warm-up calls after the first" in p for p in problems), problems


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="OpenSSH's ssh-keygen is not installed")
def test_a_signed_bundle_verifies_and_a_changed_byte_fails(runs, tmp_path, cli):
    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "lab", "-f", str(key)], check=True)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"lab@example.com {key.with_suffix('.pub').read_text()}")
    bundle = tmp_path / "b"
    shutil.copytree(runs["matmul"], bundle)
    assert cli("sign", str(bundle), "--key", str(key)).returncode == 0
    good = cli("validate", "--verify-signature", str(allowed), str(bundle))
    assert good.returncode == 0 and "valid, signed by lab@example.com" in good.stdout
    sums = (bundle / "SHA256SUMS").read_bytes()
    (bundle / "SHA256SUMS").write_bytes(sums[:10] + bytes([sums[10] ^ 1]) + sums[11:])  # one changed byte
    bad = cli("validate", "--verify-signature", str(allowed), str(bundle))
    assert bad.returncode == 1 and "does not match SHA256SUMS" in bad.stdout
    unsigned = tmp_path / "u"
    shutil.copytree(runs["matmul"], unsigned)
    assert "no signature" in cli("validate", "--verify-signature", str(allowed), str(unsigned)).stdout
