"""What a validation costs, as counted work (issue 42 item 5; benchmarks/validation_cost.py measures the seconds):
config.yaml parsed once per bundle, by libyaml, reading exactly as PyYAML's safe_load does; a config's settings
parsed (OmegaConf) and expanded into cases once per process, whatever the bundle's own run_id and results_dir,
which are still checked bundle by bundle; a genuine speedup's CI checked against the run's own seeded draw alone;
the peak table asked once per device and dtype of a bundle. Every bundle is still checked whole: a warm process
reports what a cold one reports."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import SECOND_MATMUL
from xmfu.harness.cli import formulas
from xmfu.harness.config import run_settings
from xmfu.harness.results.bundle.validator import load_bundle
from xmfu.harness.results.rederive import row_checks, times

ROOT = Path(__file__).resolve().parents[2]
RUN = ["workload=matmul", "workload.sizes=[16]", f"backends=[torch,{SECOND_MATMUL}]", "baseline=torch", "dtype=fp32",
       "timing=quick", "timing.max_time_s=0.05", "timing.warmup_s=0", "timing.min_samples=5", "timing.max_samples=10",
       "timing.round_samples=1"]


def _benchmark():
    spec = importlib.util.spec_from_file_location("validation_cost", ROOT / "benchmarks" / "validation_cost.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("validation_cost", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A real 2-row run (a speedup against its baseline) and copies of it under other run ids, made as
    benchmarks/validation_cost.py makes its bundles: one of 2 rows, one of 8 (4 sizes), each valid."""
    from xmfu.harness.cli.main import main

    tmp = tmp_path_factory.mktemp("validation-cost")
    assert main(["run", *RUN, f"results_dir={tmp}", "run_id=small"]) == 0
    copy = _benchmark().copy_bundle
    out = {"small": tmp / "small", "a": copy(tmp / "small", tmp, "copy-a", 1, 1),
           "b": copy(tmp / "small", tmp, "copy-b", 1, 2), "four": copy(tmp / "small", tmp, "four", 4, 3)}
    formulas.install()
    for bundle in out.values():
        loaded = load_bundle(bundle)
        assert loaded.problems == [] and loaded.unchecked == [], (bundle, loaded.problems, loaded.unchecked)
    return out


def _cold() -> None:
    """Forget every parse and plan this process remembers."""
    times._parsed.cache_clear()
    formulas._config.cache_clear()
    formulas._RUNS.clear()


def _counted(monkeypatch, module, name: str) -> list[int]:
    calls: list[int] = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def test_a_bundles_config_is_parsed_once_by_libyaml(made, monkeypatch):
    _cold()
    c_loads, pure = [], _counted(monkeypatch, yaml, "safe_load")
    real_load = yaml.load
    monkeypatch.setattr(yaml, "load", lambda text, Loader: c_loads.append(Loader) or real_load(text, Loader=Loader))
    assert load_bundle(made["small"]).problems == []
    assert c_loads == [yaml.CSafeLoader] and not pure  # settings, import check, formulas, run formula: one parse


def test_bundles_of_one_config_are_parsed_and_planned_once_each_checking_its_own_run_id(made, monkeypatch):
    from xmfu.harness import run

    _cold()
    parses, plans = _counted(monkeypatch, run_settings, "parse_run_config"), _counted(monkeypatch, run, "plan_phases")
    for name in ("a", "b"):
        assert load_bundle(made[name]).problems == []
    assert (len(parses), len(plans)) == (1, 1)  # OmegaConf took 35 ms a small bundle, 0.3 s at 2,000 sizes
    text = (made["b"] / "config.yaml").read_text()
    remembered = formulas._config(text).cfg
    _cold()
    assert remembered == formulas._config(text).cfg and remembered.run_id == "copy-b"


@pytest.mark.parametrize("run_id, results_dir", [("../elsewhere", None), (None, "config.yaml"), ("", None)])
def test_a_warm_process_reports_what_a_cold_one_does(made, tmp_path, run_id, results_dir):
    """A bundle whose own run_id or results_dir is bad, read after a good bundle of the same settings (remembered)
    and alone (nothing remembered): the same problems and the same unchecked figures, word for word."""
    import shutil

    bundle = tmp_path / "bad"
    shutil.copytree(made["b"], bundle)
    config = yaml.safe_load((bundle / "config.yaml").read_text())
    config.update({k: v for k, v in (("run_id", run_id), ("results_dir", results_dir)) if v is not None})
    if results_dir:  # a file, where a folder belongs
        config["results_dir"] = str(bundle / results_dir)
    text = yaml.safe_dump(config, sort_keys=False)
    (bundle / "config.yaml").write_text(text)
    _rewrite_sums(bundle)
    _cold()
    load_bundle(made["a"])  # its settings remembered
    warm = load_bundle(bundle)
    _cold()
    cold = load_bundle(bundle)
    assert (warm.problems, warm.unchecked) == (cold.problems, cold.unchecked)
    assert any("config.yaml is not a config this xmfu plans" in u for u in cold.unchecked), cold.unchecked


def _rewrite_sums(bundle: Path) -> None:
    import hashlib

    lines = []
    for line in (bundle / "SHA256SUMS").read_text().splitlines():
        name = line.partition("  ")[2]
        lines.append(f"{hashlib.sha256((bundle / name).read_bytes()).hexdigest()}  {name}")
    (bundle / "SHA256SUMS").write_text("".join(f"{x}\n" for x in lines))


TRICKY = [
    "a: 1\n", "a:\t1\n", "a: [1, {b: 2}]\nc: &x [1, 2]\nd: *x\n", "e: !!str 3\nf: 2001-12-14\ng: 1e3\nh: .inf\n",
    "i: 0o17\nj: 0x1F\nk: ~\nl: 'q''s'\n", "m: \"\\u263A\"\n", "n: |\n  lit\n  eral\no: >\n  fold\n", "? [p]\n: q\n",
    "- - - x\n", "a: b: c\n", "a: 'unterminated\n", "a: \x00\n", "a: caf\u00e9\n", "%YAML 1.1\n---\na: 1\n",
    "a: !!float nope\n", "{" * 5000 + "}" * 5000, "a:\n" + "".join(" " * i + "- x\n" for i in range(0, 300, 2)),
    "- " * 400 + "x\n", "shapes: [[96, !, 72]]\n", "a: [!, 1]\n", "",
]


def _outcome(parse, text: str) -> tuple[str, str]:
    try:
        return "data", repr(parse(text))  # repr keeps types apart (1, 1.0, True, '1')
    except RecursionError:  # its words depend on where in the stack it struck
        return "RecursionError", ""
    except Exception as exc:  # the type and words of every other error, compared
        return type(exc).__name__, str(exc)


@pytest.mark.trials  # a seeded loop over hundreds of mutated configs: in the slow group (make test-slow)
def test_libyaml_reads_config_yaml_as_the_pure_loader_does():
    """parsed_config gives what yaml.safe_load gives, or raises what it raises, word for word: libyaml only for a
    plain ASCII text nested shallowly (it takes tabs the pure loader refuses, and a config nested 100,000 levels
    deep ends the process), the pure loader's own error wherever libyaml refuses."""
    rng = random.Random(42)
    base = (ROOT / "configs" / "timing" / "default.yaml").read_text() + "sizes:\n- 1\n- 2\nshapes: [[96, 80, 72]]\n"
    pool = [*":-[]{}\"'#&*!|>%@`\n ,?.019az\\=~_\t", "- ", ": ", "---\n", "!!binary ", "&a ", "*a", "<<: ", "[!, 1]"]
    texts = list(TRICKY)
    for _ in range(400):
        text = base
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(text) + 1)
            text = text[:at] + rng.choice(pool) + text[at + rng.randint(0, 2):]
        texts.append(text)
    for text in texts:
        times._parsed.cache_clear()
        assert _outcome(times.parsed_config, text) == _outcome(yaml.safe_load, text), repr(text[:200])
    assert times._depth_bound("a: 1\nb:\n  - 2\n") <= times.C_LOADER_MAX_DEPTH < times._depth_bound("[" * 200)


def test_a_genuine_speedup_is_checked_with_the_runs_own_draw_alone_and_a_moved_one_still_fails(made, monkeypatch):
    rows = [json.loads(x) for x in (made["four"] / "cases.jsonl").read_text().splitlines()]
    samples = [json.loads(x) for x in (made["four"] / "samples.jsonl").read_text().splitlines()]
    settings = times.settings_of((made["four"] / "config.yaml").read_text())
    draws = _counted(monkeypatch, row_checks, "paired_speedup_draws")
    assert row_checks.speedup_problems(rows, samples, settings, "cases.jsonl") == []
    assert len(draws) == sum(1 for r in rows if r.get("speedup"))  # the 8,000-draw reference was 8/9 of the cost
    sp = next(r for r in rows if r.get("speedup"))["speedup"]

    def bound_problems() -> list[str]:
        found = row_checks.speedup_problems(rows, samples, settings, "cases.jsonl")
        return [p for p in found if "not a bootstrap bound" in p]  # a moved CI may change the verdict too

    # Both bounds moved off the run's own draw: each is read against its band. A genuine bound may lie at its
    # band's edge (the bootstrap of few rounds is lumpy), so each is put in its band's middle, the band the check
    # computed (the message rounds it to 6 digits: a band of one draw's value, [1.12333, 1.12333], read back from
    # it, missed that value by more than the tolerance).
    bands: dict[float, tuple[float, float]] = {}
    real_band = row_checks.ci_band
    monkeypatch.setattr(row_checks, "ci_band", lambda d, q, n: bands.setdefault(q, real_band(d, q, n)))
    sp["ci95_low"], sp["ci95_high"] = sp["value"] * 0.5, sp["value"] * 2
    for problem in bound_problems():
        label = "ci95_low" if "speedup.ci95_low" in problem else "ci95_high"
        low, high = bands[min(bands) if label == "ci95_low" else max(bands)]  # log speedups (row_checks)
        sp[label] = math.exp((low + high) / 2)
    assert len(bands) == 2 and bound_problems() == []  # one band for each bound, of the one row moved
    sp["ci95_low"] = sp["value"] * 0.999  # moved past what the paired samples give
    found = bound_problems()
    assert len(found) == 1 and "speedup.ci95_low" in found[0]


def test_the_peak_table_is_asked_once_per_device_and_dtype_of_a_bundle(made, monkeypatch):
    looked_up = _counted(monkeypatch, row_checks, "lookup")
    matched = _counted(monkeypatch, row_checks, "match_device")
    assert load_bundle(made["four"]).problems == []  # 8 rows, one device, one dtype
    assert (len(looked_up), len(matched)) == (1, 1)
    rows = [json.loads(x) for x in (made["four"] / "cases.jsonl").read_text().splitlines()]
    devices = json.loads((made["four"] / "environment.json").read_text())["devices"]
    settings = times.settings_of((made["four"] / "config.yaml").read_text())
    rows[5]["peak_tflops"] *= 2  # one row's peak doubled: still named, whatever the others' lookups
    memo: dict = {}
    found = [p for i, row in enumerate(rows, 1)
             for p in row_checks.peak_problems(row, devices, settings, f"line {i}", memo)]
    assert len(found) == 1 and found[0].startswith("line 6: peak_tflops")


def test_same_finds_what_it_found_before_by_walking():
    """times.same compares JSON values in one step where Python finds them equal; what it finds is unchanged."""
    def walked(a, b):
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(walked(a[k], b[k]) for k in a)
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(walked(x, y) for x, y in zip(a, b, strict=True))
        return times.close(a, b)

    values = [1, 1.0, True, 0, False, None, "1", 1 + 1e-9, 1.1, [1, 2], [1.0, 2], [True, 2], {"a": 1}, {"a": 1.0},
              {"a": [1, {"b": None}]}, {"a": [1, {"b": 0}]}, [], {}, float("inf"), float("nan"), -0.0, 0.0]
    for a in values:
        for b in values:
            assert times.same(a, b) == walked(a, b), (a, b)
