"""Plug-in backends (harness/engine/plugins.py, docs/backends.md): named by import path or installed entry point,
run beside the built-ins through the same gate, timing and bundle; a bad plug-in is one paragraph and exit 2; one
that raises in a case fails that row only. The installed example package is run end to end in
tests/e2e/test_plugin_package.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xmfu.harness.engine import plugins
from xmfu.harness.engine.declare import ConfigError
from xmfu.workloads.catalog import build_registry

SAMPLES = "tests.engine.plugin_samples"
RUN = ["workload=matmul", "workload.sizes=[32,64]", "dtype=fp32", "timing=quick", "timing.max_time_s=0.3",
       "timing.warmup_s=0"]


def _rows(bundle: Path) -> list[dict]:
    return [json.loads(line) for line in (bundle / "cases.jsonl").read_text().splitlines()]


def test_a_plugin_by_import_path_runs_beside_a_builtin_with_its_provenance_in_row_and_key(cli, tmp_path):
    done = cli("run", *RUN, "workload.sizes=[32]", f"backends=[torch,{SAMPLES}:Matmul]", "baseline=torch",
               f"results_dir={tmp_path}", "run_id=p")
    assert done.returncode in (0, 3), done.stderr
    rows = _rows(tmp_path / "p")
    mine = [r for r in rows if r["backend"] == f"{SAMPLES}:Matmul"]
    builtin = [r for r in rows if r["backend"] == "torch"]
    assert len(mine) == 1 and all(r["status"] == "ok" and r["correctness"]["ok"] for r in mine)
    assert mine[0]["plugin"]["object"] == f"{SAMPLES}:Matmul" and mine[0]["plugin"]["entry_point"] is None
    assert mine[0]["plugin"]["package"] is None and mine[0]["plugin"]["file"].endswith("plugin_samples.py")
    assert mine[0]["comparability"]["plugin"] == {"object": f"{SAMPLES}:Matmul", "package": None, "version": None}
    assert mine[0]["comparability_key"] != builtin[0]["comparability_key"]  # the plug-in's own series
    assert "plugin" not in builtin[0] and "plugin" not in builtin[0]["comparability"]
    assert mine[0]["speedup"]["baseline"] == "torch"
    assert cli("validate", str(tmp_path / "p")).returncode == 0


def test_a_module_level_instance_is_a_plugin_too(cli, tmp_path):
    done = cli("run", *RUN, "workload.sizes=[32]", f"backends=[{SAMPLES}:matmul]", f"results_dir={tmp_path}",
               "run_id=i")
    assert done.returncode in (0, 3), done.stderr
    assert [r["status"] for r in _rows(tmp_path / "i")] == ["ok"]


def test_a_plugin_that_raises_in_one_case_fails_that_row_and_the_run_goes_on(cli, tmp_path):
    done = cli("run", *RUN, f"backends=[torch,{SAMPLES}:RaisesOnLargeCases]", f"results_dir={tmp_path}",
               "run_id=r")
    assert done.returncode in (0, 3), done.stderr  # a failed row is recorded; the run completes
    rows = {(r["params"]["m"], r["backend"]): r for r in _rows(tmp_path / "r")}
    assert rows[(32, f"{SAMPLES}:RaisesOnLargeCases")]["status"] == "ok"
    failed = rows[(64, f"{SAMPLES}:RaisesOnLargeCases")]
    assert failed["status"] == "failed" and "no tile for m >= 64" in failed["reason"]
    assert rows[(64, "torch")]["status"] == "ok"


@pytest.mark.parametrize("backend, says", [
    ("no_such_module.kernels:Fast", "cannot be imported: ModuleNotFoundError: No module named 'no_such_module'"),
    (f"{SAMPLES}:Missing", "has no 'Missing'"),
    (f"{SAMPLES}:WrongSignature", "`available()` cannot be called as available(case, ctx)"),
    (f"{SAMPLES}:NoWorkload", "does not say its workload"),
    (f"{SAMPLES}:UnknownWorkload", "is for workload 'convolution', which xmfu does not have. Allowed: attention"),
    (f"{SAMPLES}:AttentionOnly", "is a attention backend; this run's workload is matmul"),
    (f"{SAMPLES}:NeedsArguments", "NeedsArguments() raised TypeError"),
    (f"{SAMPLES}:BadFrameworks", "frameworks ('cuda',) is not a list of frameworks"),
    ("not_a_plugin", "backends[0]: unknown value 'not_a_plugin'"),
])
def test_a_bad_plugin_is_one_paragraph_and_exit_2(cli, tmp_path, backend, says):
    done = cli("run", *RUN, f"backends=[{backend}]", f"results_dir={tmp_path}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr and "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not any(tmp_path.iterdir())  # refused before anything was written


def test_an_unknown_backend_says_how_a_plugin_is_named(cli, tmp_path):
    done = cli("run", *RUN, "backends=[mine]", f"results_dir={tmp_path}")
    assert done.returncode == 2 and "module.path:object" in done.stderr, done.stderr


def _entry(monkeypatch, name: str, value: str) -> None:
    found = [plugins.Installed(name, value, "my-kernels", "1.2.0")]
    monkeypatch.setattr(plugins, "installed", lambda: found)


def test_an_installed_entry_point_runs_by_its_name_with_its_package_and_version(cli, tmp_path, monkeypatch):
    _entry(monkeypatch, "fast_mm", f"{SAMPLES}:Matmul")
    done = cli("run", *RUN, "workload.sizes=[32]", "backends=[torch,fast_mm]", f"results_dir={tmp_path}",
               "run_id=e")
    assert done.returncode in (0, 3), done.stderr
    row = next(r for r in _rows(tmp_path / "e") if r["backend"] == "fast_mm")
    assert row["status"] == "ok" and row["plugin"]["package"] == "my-kernels" and row["plugin"]["version"] == "1.2.0"
    assert row["plugin"]["entry_point"] == "fast_mm"
    assert row["comparability"]["plugin"] == {"object": f"{SAMPLES}:Matmul", "package": "my-kernels",
                                              "version": "1.2.0"}


def test_the_default_backends_stay_the_builtins_when_a_plugin_is_installed(monkeypatch):
    _entry(monkeypatch, "fast_mm", f"{SAMPLES}:Matmul")
    registry = build_registry()
    assert plugins.register_named(registry, {"workload": {"name": "matmul"}, "backends": None}) == []
    assert registry.backends_by_workload()["matmul"] == list(registry.builtin_backends("matmul"))


def test_an_entry_point_named_as_a_builtin_is_refused_when_named(monkeypatch):
    _entry(monkeypatch, "torch", f"{SAMPLES}:Matmul")
    with pytest.raises(ConfigError, match="is a built-in matmul backend, and the installed plug-in torch "
                                          r"\(my-kernels 1.2.0"):
        plugins.register_named(build_registry(), {"workload": {"name": "matmul"}, "backends": ["torch"]})


def test_help_and_doctor_list_the_installed_plugins_with_package_and_version(monkeypatch):
    from xmfu.harness.config.run_help import backends_section
    from xmfu.harness.suites import doctor

    _entry(monkeypatch, "fast_mm", f"{SAMPLES}:Matmul")
    assert f"  fast_mm (my-kernels 1.2.0: {SAMPLES}:Matmul)" in backends_section({"matmul": ["torch"]})
    registry = build_registry()
    found = plugins.register_installed(registry)
    assert found == [{"name": "fast_mm", "package": "my-kernels", "version": "1.2.0", "object": f"{SAMPLES}:Matmul",
                      "workload": "matmul", "problem": None}]
    assert "fast_mm" in registry.backends_by_workload()["matmul"]  # asked like a built-in
    facts = doctor.Findings(facts={"plugins": found})
    assert "plug-in backends: fast_mm (my-kernels 1.2.0" in _plugin_line(doctor, facts)


def _plugin_line(doctor, found) -> str:
    f = {"platform": {"kind": "cpu", "reason": "r"}, "devices": [], "packages": {}, "peaks": {},
         "telemetry": {"sampler": "s", "available": True, "reason": None, "fields": {}},
         "clocks": {"locked": None}, "nccl": None, **found.facts}
    return doctor.render(doctor.Findings(facts=f))


def test_doctor_names_a_broken_installed_plugin_as_a_problem(monkeypatch):
    _entry(monkeypatch, "broken", f"{SAMPLES}:WrongSignature")
    found = plugins.register_installed(build_registry())
    assert found[0]["workload"] == "matmul" and "cannot be called as available(case, ctx)" in found[0]["problem"]


def test_a_bundle_of_a_plugin_validates_where_the_plugin_is_not_installed(cli, tmp_path):
    """The validator re-plans the bundle's config: the plug-in's name is registered without importing it."""
    registry = build_registry()
    plugins.placeholder(registry, {"workload": {"name": "matmul"}, "backends": ["torch", "gone.pkg:Kernel"]})
    assert "gone.pkg:Kernel" in registry.backends_by_workload()["matmul"]
