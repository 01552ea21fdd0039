"""What changed since the run before (issue 38, item 2): on a store of written bundles with a planted toolchain bump,
image change, a drop, a lost and a gained series; markdown and JSON, --since, and bad input."""

from __future__ import annotations

import json

import pytest

from tests.results.rows import MANIFEST, ci95, keyed, matmul_row, time_summary, untimed_row
from xmfu.harness.results.bundle.reader import read_bundle
from xmfu.harness.results.history import changes, parquet

pytest.importorskip("pyarrow", exc_type=ImportError)

OVERRIDES = ["experiment=nightly", "suite.only=[matmul]", "results_dir=/scratch/n"]


def _matmul(n: int, tflops: float) -> dict:
    row = {**matmul_row(n, n, n), "device": "GPU A"}
    t = time_summary([row["flops"] / (tflops * 1e12)] * 3)
    return ci95({**row, "time_s": t, "tflops": row["flops"] / t["median"] / 1e12,
                 "mfu": row["flops"] / t["median"] / 1e12 / row["peak_tflops"]})


def _attention(status: str = "ok") -> dict:
    params = {"causal": True, "mode": "fwd"}
    if status != "ok":
        return untimed_row(status, workload="attention", backend="triton", case_id="att", platform="cuda",
                           device="GPU A", dtype="bf16", params=params)
    return keyed({**matmul_row(64, 64, 64), "device": "GPU A", "workload": "attention", "backend": "triton",
                  "case_id": "att", "params": params})


def _bundle(folder, night: int, rows: list[dict], torch: str = "2.13.0", digest: str = "sha256:aaa"):
    from tests.results.rows import samples_of
    from xmfu.harness.results.bundle.writer import BundleWriter

    run_id = f"night{night}"
    manifest = {**MANIFEST, "run_id": run_id, "created": f"2026-11-{night + 1:02d}T02:00:00.000000Z",
                "overrides": OVERRIDES}
    environment = {"driver": "570", "packages": {"torch": torch}, "container": {"XMFU_IMAGE_DIGEST": digest}}
    writer = BundleWriter(folder / run_id, manifest, "", environment)
    for row in rows:
        row = {**row, "run_id": run_id}
        writer.append(row, {"case_id": row["case_id"], "backend": row["backend"], "samples": samples_of(row)})
    writer.finalize("complete")
    return folder / run_id


@pytest.fixture
def store(tmp_path):
    return planted(tmp_path)


def planted(tmp_path):
    """Seven nights at 700-702 TFLOP/s with the attention row ok; the eighth on torch 2.14.0 in another image, the
    matmul 14% slower, the attention row failed and a new matmul size."""
    store = tmp_path / "store"
    for night in range(7):
        folder = _bundle(tmp_path / "b", night, [_matmul(8192, 700.0 + night % 3), _attention()])
        parquet.add(store, read_bundle(folder), read_bundle(folder).environment())
    folder = _bundle(tmp_path / "b", 7, [_matmul(8192, 600.0), _attention("failed"), _matmul(4096, 650.0)],
                     torch="2.14.0", digest="sha256:bbb")
    parquet.add(store, read_bundle(folder), read_bundle(folder).environment())
    return store


def test_the_changes_since_the_run_before(store, tmp_path):
    (found,) = changes.changes(parquet.load(store))
    assert (found.platform, found.device, found.run.id, found.since.id) == ("cuda", "GPU A", "night7", "night6")
    assert found.toolchain == [("torch", "2.13.0", "2.14.0"), ("image_digest", "sha256:aaa", "sha256:bbb")]
    assert [(f[0].split()[1], f[2], f[3]) for f in found.flips] == [
        ("matmul-bf16-8192x8192x8192-NN", "no_regression", "regression"), ("att", "no_regression", "failure")]
    assert found.lost == [("attention att triton GPU A bf16", "failed")]
    assert found.gained == [("matmul matmul-bf16-4096x4096x4096-NN torch GPU A bf16", "new")]
    (drop,) = found.moved
    assert drop.change == pytest.approx(600 / 701 - 1, abs=1e-3) and drop.worse and drop.detectable == 0.02
    assert drop.repro == "xmfu run experiment=nightly 'suite.only=[matmul]' results_dir=/scratch/n"
    assert drop.bundle == str((tmp_path / "b" / "night7").resolve())
    assert found.too_few == 1  # the new size


def test_changes_as_markdown_and_json_through_the_command(store, tmp_path, cli):
    out = cli("history", "changes", "--store", str(store))
    assert out.returncode == 0
    text = out.stdout
    assert text.startswith("## What changed on cuda GPU A: run night7 (2026-11-08 02:00 UTC) since night6")
    assert "- torch: 2.13.0 -> 2.14.0\n- image_digest: sha256:aaa -> sha256:bbb" in text
    assert "- lost: attention att triton GPU A bf16 (failed)" in text
    assert ("| matmul matmul-bf16-8192x8192x8192-NN torch GPU A bf16 | tflops | 701 | 600 | -14.4% (worse) | 2.0% | "
            "`xmfu run experiment=nightly 'suite.only=[matmul]' results_dir=/scratch/n` | ") in text
    assert text.index("Toolchain") < text.index("flipped") < text.index("gained or lost") < text.index("moved")
    since = json.loads(cli("history", "changes", "--store", str(store), "--since", "night2", "--format",
                           "json").stdout)
    (place,) = since["places"]
    assert place["since"]["id"] == "night2" and place["moved"][0]["metric"] == "tflops"
    assert place["toolchain"] == [{"what": "torch", "before": "2.13.0", "after": "2.14.0"},
                                  {"what": "image_digest", "before": "sha256:aaa", "after": "sha256:bbb"}]
    bad = cli("history", "changes", "--store", str(store), "--since", "night99")
    assert bad.returncode == 2 and "--since night99 is no run of the store" in bad.stderr
    assert bad.stderr.count("\n") == 1 and "its latest: night7" in bad.stderr


def test_one_run_is_nothing_to_compare_and_an_older_store_says_what_it_lacks(tmp_path, cli):
    from msgspec.structs import replace

    store = tmp_path / "store"
    folder = _bundle(tmp_path / "b", 0, [_matmul(8192, 700.0)])
    parquet.add(store, read_bundle(folder), {})
    out = cli("history", "changes", "--store", str(store))
    assert out.returncode == 0
    assert out.stdout == "nothing to compare: each platform and device in the store has one run\n"
    (row,) = parquet.load(store)
    assert changes.repro(replace(row, overrides=None, bundle=None)) == (
        "not recorded (stored before the overrides column)", "not recorded (stored before the bundle column)")
    assert changes.repro(replace(row, bundle=""))[1] == "not kept (added from an archive)"
    assert changes.repro(replace(row, overrides="workload=matmul run_id=n7-matmul 'backends=[torch]'"))[0] == \
        "xmfu run workload=matmul 'backends=[torch]'"  # a repeat is a run of its own


def test_a_key_change_is_a_lost_series_not_comparable(store, tmp_path):
    from msgspec.structs import replace

    rows = parquet.load(store)
    rows = [replace(r, comparability_key="other") if r.run_id == "night7" and r.workload == "matmul" else r
            for r in rows]
    (found,) = changes.changes(rows)
    assert ("matmul matmul-bf16-8192x8192x8192-NN torch GPU A bf16",
            f"not comparable (comparability key {rows[0].comparability_key} -> other)") in found.lost


def test_the_history_page_shows_the_changes_first(store, tmp_path, cli):
    assert cli("history", "report", "--store", str(store), "-o", str(tmp_path / "h.html")).returncode == 0
    html = (tmp_path / "h.html").read_text()
    assert html.index("What changed since the run before</h2>") < html.index("Changes beyond the noise</h2>")
    assert "<li>torch: 2.13.0 -&gt; 2.14.0</li>" in html and "<li>lost: attention att triton GPU A bf16 (failed)</li>" \
        in html
    assert "xmfu run experiment=nightly &#x27;suite.only=[matmul]&#x27; results_dir=/scratch/n" in html
