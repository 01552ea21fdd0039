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

import numpy as np
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
    owns = _counted(monkeypatch, row_checks, "paired_speedup_bounds")
    assert row_checks.speedup_problems(rows, samples, settings, "cases.jsonl") == []
    # the run's own draws of every row in one call; no 8,000-draw reference (it was 8/9 of the cost)
    assert any(r.get("speedup") for r in rows) and len(owns) == 1 and draws == []
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


def test_the_row_medians_equal_numpys_nanmedian_value_for_value():
    """speedup.row_nanmedians replaces np.nanmedian(axis=1) in the block bootstrap (its masked-array path was most
    of validate's time): a speedup's CI stated by an earlier run must re-derive to the same bits."""
    from xmfu.harness.results.statistics.speedup import row_nanmedians

    rng = np.random.default_rng(7)
    for _ in range(400):
        rows, width = int(rng.integers(1, 30)), int(rng.integers(1, 20))
        m = rng.lognormal(size=(rows, width))
        if rng.random() < 0.3:
            m = np.round(m, 1)  # ties
        padded = rng.random() < 0.8  # else every round of equal length: no NaN
        for i in range(rows if padded else 0):  # rounds of unequal length: NaN padding, at least one value a row
            m[i, int(rng.integers(1, width + 1)):] = np.nan
            rng.shuffle(m[i])
        assert np.array_equal(row_nanmedians(m), np.nanmedian(m, axis=1))


def test_many_pairs_drawn_together_give_each_pairs_own_bootstrap_bit_for_bit(monkeypatch):
    """paired_bounds.paired_speedup_bounds draws the pairs of one repeat and evenly filled rounds together (one sort for
    many): each pair's value, rounds and CI quantiles are what paired_speedup_draws and np.quantile give it alone,
    however the pairs are chunked; uneven rounds, several repeats and pairs without a shared round go alone."""
    from xmfu.harness.results.statistics import paired_bounds, speedup

    rng = np.random.default_rng(11)
    pairs = []
    for kind in range(160):
        r = int(rng.integers(1, 12))
        if kind % 4 == 0:  # even rounds, one repeat: drawn together
            rb, rc = ([i for i in range(r) for _ in range(int(w))] for w in rng.integers(1, 4, size=2))
            pairs.append(((list(rng.lognormal(0, .3, len(rb))), rb), (list(rng.lognormal(0, .3, len(rc))), rc)))
        elif kind % 4 == 1:  # uneven rounds
            n = int(rng.integers(r, 3 * r + 1))
            pairs.append(((list(rng.lognormal(0, .3, n)), list(rng.integers(0, r, n))),
                          (list(rng.lognormal(0, .3, n)), list(rng.integers(0, r, n)))))
        elif kind % 4 == 2:  # several repeats
            n = int(rng.integers(r, 3 * r + 1))
            rounds, repeats = list(rng.integers(0, r, n)), list(rng.integers(0, 3, n))
            pairs.append(((list(rng.lognormal(0, .3, n)), rounds, repeats),
                          (list(rng.lognormal(0, .3, n)), rounds, repeats)))
        else:  # no shared round, or three
            pairs.append(((list(rng.lognormal(0, .3, 3)), [0, 1, 2]),
                          (list(rng.lognormal(0, .3, 3)), [3, 4, 5] if kind % 8 == 3 else [0, 1, 2])))
    q = (0.025, 0.975)
    for resamples, chunk in ((1, 4_000_000), (9, 4_000_000), (400, 20_000)):
        monkeypatch.setattr(paired_bounds, "CHUNK_VALUES", chunk)
        for (base, cand), got in zip(pairs, paired_bounds.paired_speedup_bounds(pairs, resamples, q), strict=True):
            alone = speedup.paired_speedup_draws(base, cand, resamples)
            if alone is None:
                assert got is None
                continue
            assert got[0] == alone[0] and got[2] == alone[2]
            assert np.array_equal(got[1], np.quantile(alone[1], q))


def test_the_warmup_figures_of_a_whole_bundle_are_each_records_own():
    """rederive/warmup.warmup_figures computes every record's (timed median, fastest and median warm-up call) for
    records of one shape at once: each is what the record gives alone, and a record with nothing to compare (too
    few warm-up calls, a bool, an integer past any float) gets None, as warmup_problems alone returns nothing."""
    from xmfu.harness.results.rederive import warmup

    rng = np.random.default_rng(3)
    records = [{"samples": list(rng.lognormal(size=int(n))), "warmup": list(rng.lognormal(size=int(w)))}
               for n, w in zip(rng.integers(1, 12, 300), rng.integers(1, 40, 300), strict=True)]
    records += [{"samples": [1.0, True], "warmup": [1.0] * 9}, {"samples": [1.0], "warmup": [1.0] * 8 + [10**400]},
                {"samples": [1.0]}, "not a record"]
    for rec, got in zip(records, warmup.warmup_figures(records), strict=True):
        ok = isinstance(rec, dict) and warmup._numbers(rec.get("samples")) and warmup._numbers(rec.get("warmup")) \
            and len(rec["warmup"]) > warmup.MIN_WARMUP
        if not ok:
            assert got is None
            continue
        after = np.asarray(rec["warmup"][1:])
        assert got == (float(np.median(np.asarray(rec["samples"]))), float(after.min()), float(np.median(after)))


def test_a_samples_line_reads_as_its_plain_decode_with_its_defaults_and_its_faults_as_before():
    """bundle/records.py builds a samples.jsonl line's plain value from its typed record (one decode, not two): the
    keys the line has read as the plain decoder reads them (an integer sample as its float), the ones it leaves
    out as their declared defaults (None or []), a variant's samples as plain data; a line that is not JSON, or
    not a samples record, is refused or reported with the words the plain path gives."""
    import msgspec

    from xmfu.harness.results.bundle import records

    line = json.dumps({"case_id": "c", "backend": "torch", "samples": [1, 2.5], "inner": 3,
                       "variants": {"comm_alone": {"samples": [0.5], "repeats": [0]}}}).encode()
    value, typed, problems = records.decoded("samples", line, "samples.jsonl line 1")
    plain = msgspec.json.decode(line)
    assert problems == [] and typed is not None
    assert {k: value[k] for k in plain if k != "variants"} == {k: v for k, v in plain.items() if k != "variants"}
    assert value["samples"] == [1.0, 2.5] and type(value["samples"][0]) is float
    assert all(value[k] in (None, []) for k in value if k not in plain)
    assert value["variants"] == {"comm_alone": {"samples": [0.5], "rank_samples": None, "repeats": [0]}}
    bad_type = line.replace(b'"inner": 3', b'"inner": "3"')
    value, typed, problems = records.decoded("samples", bad_type, "w")
    assert typed is None and value == msgspec.json.decode(bad_type)
    assert problems == ["w: inner: expected `int | null`, got `str`"]
    for broken in (line[:-1], line.replace(b"2.5", b"NaN")):
        with pytest.raises(records.Rejected, match="not valid JSON"):
            records.decoded("samples", broken, "w")


def test_a_command_that_holds_its_bundles_freezes_them_and_one_that_streams_does_not(made):
    """cli/common: compare, report and validate hold what they load to their end, and freeze it (the collector
    never walks it again); history add and export stream bundles one at a time and freeze nothing (what they made
    of the last one must stay collectable). Either way the collector is on again after the load, as it was."""
    import gc

    from xmfu.harness.cli import common

    frozen = gc.get_freeze_count()
    try:
        assert common.validated_bundle("compare", str(made["four"])).rows
        assert gc.get_freeze_count() > frozen and gc.isenabled()
        gc.unfreeze()
        [streamed] = list(common.each_gathered_bundle("export", [str(made["four"])]))
        assert streamed.rows
        assert gc.get_freeze_count() == 0 and gc.isenabled()
    finally:
        gc.unfreeze()
