"""What a reader trusts (issue 42 item 15): an archive that lists one bundle three times (`b`, `b`, `./b`) is
refused, not read three times; a bundle's rows state the frameworks they ran on, and an environment.json edited
after the run (torch said to be 9.9.9) no longer validates; an `xmfu.benchmark` bundle has its rows' params, FLOPs,
bytes and protocol and its manifest's key re-derived, as a bundle of `xmfu run` has. (Files added to a signed bundle:
tests/cli/test_signatures.py.)"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from tests.results.rows import MANIFEST, valid_row
from tests.results.test_archive import _rewrite, reference  # noqa: F401 (a fixture)
from xmfu.harness.results.bundle import archive
from xmfu.harness.results.bundle.validator import load_bundle
from xmfu.harness.results.bundle.writer import BundleWriter


def _resum(bundle: Path, *names: str) -> None:
    """SHA256SUMS rewritten for `names` as they now are: an edit a forger checksums too."""
    lines = []
    for line in (bundle / "SHA256SUMS").read_text().splitlines():
        digest, _, name = line.partition("  ")
        if name in names:
            digest = hashlib.sha256((bundle / name).read_bytes()).hexdigest()
        lines.append(f"{digest}  {name}")
    (bundle / "SHA256SUMS").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("listed", [["h100/run-a", "h100/run-a"], ["h100/run-a", "./h100/run-a"],
                                    ["h100/run-a", "h100/run-a/"]])
def test_an_archive_listing_one_bundle_twice_is_refused(reference, tmp_path, cli, listed):  # noqa: F811
    packed = archive.pack([reference], tmp_path / "h100.tar.gz", "0").output

    def relist(info, data):
        if info.name != archive.MANIFEST_NAME:
            return [(info, data)]
        manifest = json.loads(data)
        manifest["bundles"] = [*listed, "h100/run-b"]
        new = json.dumps(manifest).encode()
        info.size = len(new)
        return [(info, new)]

    forged = _rewrite(packed, relist)
    with pytest.raises(archive.ArchiveError, match="lists the bundle 'h100/run-a' more than once"), \
            archive.opened(forged):
        pass
    exported = cli("export", str(forged), "-o", str(tmp_path / "rows.csv"))
    assert exported.returncode == 2 and "more than once" in exported.stderr, exported.stdout
    assert not (tmp_path / "rows.csv").exists()


def _stated(tmp_path: Path, versions: dict[str, str] | None) -> Path:
    row = valid_row(run_id="r", case_id="matmul-fp32-16", workload="matmul")
    if versions is not None:
        row["versions"] = versions
    writer = BundleWriter(tmp_path / "r", MANIFEST, "", {"packages": {"torch": "2.13.0", "jax": None}})
    writer.append(row, {"case_id": "matmul-fp32-16", "backend": "torch", "samples": [1e-3, 1.1e-3, 0.9e-3]})
    writer.finalize("complete")
    return tmp_path / "r"


def test_an_environment_edited_after_the_run_no_longer_agrees_with_its_rows(tmp_path):
    bundle = _stated(tmp_path, {"torch": "2.13.0"})
    assert load_bundle(bundle).problems == []
    env = json.loads((bundle / "environment.json").read_text())
    env["packages"]["torch"] = "9.9.9"
    (bundle / "environment.json").write_text(json.dumps(env))
    _resum(bundle, "environment.json")
    assert load_bundle(bundle).problems == [
        "cases.jsonl line 1: versions.torch '2.13.0' is not environment.json's packages.torch '9.9.9': the row and "
        "the environment state different software stacks"]


def test_rows_written_before_versions_were_recorded_are_not_held_to_them(tmp_path):
    assert load_bundle(_stated(tmp_path, None)).problems == []


def test_a_row_states_the_installed_versions_of_the_frameworks_it_ran_beside():
    import torch  # noqa: F401 (loaded, as a run's torch backend loads it)

    from xmfu.harness.machine import environment, stack

    stated = stack.loaded_versions()
    packages = environment.package_versions()
    assert "torch" in stated and all(packages[name] == version for name, version in stated.items())
    assert all(name in sys.modules for name in stated)


@pytest.fixture(scope="module")
def benchmarked(tmp_path_factory) -> Path:
    import numpy as np

    import xmfu

    a = np.arange(64.0).reshape(8, 8)
    result = xmfu.benchmark({"mm": lambda: a @ a, "dot": lambda: np.dot(a, a)}, reference=lambda: a @ a,
                            flops=2 * 8**3, bytes_moved=3 * 8 * 8 * 8, baseline="mm", device="cpu",
                            timing={"max_time_s": 0.2, "warmup_s": 0, "min_samples": 5},
                            results_dir=str(tmp_path_factory.mktemp("bench")))
    return Path(result.bundle)


def test_a_benchmark_bundle_has_every_figure_re_derived(benchmarked, cli):
    from xmfu.harness.cli import formulas

    formulas.install()
    loaded = load_bundle(benchmarked)
    assert loaded.problems == [] and loaded.unchecked == [], (loaded.problems, loaded.unchecked)
    checked = cli("validate", str(benchmarked))
    assert checked.returncode == 0 and checked.stdout.strip().splitlines() == [f"{benchmarked}: valid"]


def test_a_benchmark_bundle_whose_case_was_edited_fails(benchmarked, tmp_path):
    import shutil

    from xmfu.harness.cli import formulas

    formulas.install()
    forged = Path(shutil.copytree(benchmarked, tmp_path / "forged"))
    config = (forged / "config.yaml").read_text()
    assert "  flops: 1024.0\n" in config
    (forged / "config.yaml").write_text(config.replace("  flops: 1024.0\n", "  flops: 2048.0\n"))
    _resum(forged, "config.yaml")
    problems = load_bundle(forged).problems
    assert any("cases.jsonl line 1: flops" in p for p in problems), problems
    (forged / "config.yaml").write_text(config.replace("  cold_cache: false\n", "  cold_cache: true\n"))
    _resum(forged, "config.yaml")  # another protocol: every row's key and the manifest's no longer follow
    problems = load_bundle(forged).problems
    assert any("manifest.json" in p and "comparability_key" in p for p in problems), problems


def test_a_malformed_benchmark_config_is_not_re_derived_and_says_why(benchmarked, tmp_path):
    import shutil

    from xmfu.harness.cli import formulas

    formulas.install()
    forged = Path(shutil.copytree(benchmarked, tmp_path / "forged"))
    config = (forged / "config.yaml").read_text()
    (forged / "config.yaml").write_text(config.replace("  flops: 1024.0\n", "  flops: many\n"))
    _resum(forged, "config.yaml")
    loaded = load_bundle(forged)
    assert any("config.yaml is not a config this xmfu plans (ValueError" in u for u in loaded.unchecked), loaded
