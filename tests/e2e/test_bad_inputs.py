"""Every bad input a user has been seen to give: one paragraph naming what was wrong, the exit status the
docs promise, never a traceback. In-process through the CLI's `main` (a subprocess each would cost
seconds of imports); Ctrl-C at start-up is a real process and signal."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.results.rows import MANIFEST, valid_row
from xmfu.harness.cli.main import main
from xmfu.harness.results.bundle.reader import read_bundle
from xmfu.harness.results.bundle.validator import validate_bundle
from xmfu.harness.results.bundle.writer import BundleWriter

pytestmark = pytest.mark.e2e
RUN = ["backends=[torch]", "workload.sizes=[16]", "timing=quick", "timing.max_time_s=0.2", "timing.warmup_s=0",
       "telemetry.enabled=false"]


def _bundle(folder, run_id, case_id="matmul-fp32-16", workload="matmul"):
    writer = BundleWriter(folder / run_id, {**MANIFEST, "run_id": run_id}, "", {})
    writer.append(valid_row(run_id=run_id, case_id=case_id, workload=workload),
                  {"case_id": case_id, "backend": "torch", "samples": [1e-3, 1.1e-3, 0.9e-3]})
    writer.finalize("complete")
    return str(folder / run_id)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "tagged.yaml").write_text("GPU: !!python/object/apply:os.system ['echo owned']\n")
    (tmp_path / "empty-store").mkdir()
    (tmp_path / "bad-store").mkdir()
    (tmp_path / "bad-store" / "x.parquet").write_text("not parquet")
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "foreign-store").mkdir()  # a Parquet file of another schema: read before as rows of nulls
    pq.write_table(pa.table({"device": ["GPU"], "price": [2.0]}), tmp_path / "foreign-store" / "prices.parquet")
    return {"file": str(tmp_path / "a-file"), "tagged": str(tmp_path / "tagged.yaml"),
            "a": _bundle(tmp_path, "a"), "b": _bundle(tmp_path, "b"),
            "attention": _bundle(tmp_path, "att", "attention-bf16-fwd", "attention"), "dir": str(tmp_path)}


CASES = [  # (arguments, exit status, words the one-paragraph message must contain)
    (["run", "workload=fft"], 2, "unknown workload 'fft'"),
    (["run", "dtype=[bf16"], 2, "malformed override"),
    (["run", "backends=[torch,cuda]"], 2, "backends[1]"),
    (["run", "workload.sizes=[0]"], 2, "workload.sizes[0]"),
    (["run", "workload.sizes=[-5]"], 2, "workload.sizes[0]"),
    (["run", "dtype=fp64"], 2, "dtype"),
    (["run", "colour=blue"], 2, "unknown setting 'colour'"),
    (["run", "-m", "dtype=fp32,int4"], 2, "dtype"),
    (["env", "--device", "gpu"], 2, "device=gpu was asked for"),
    (["run", "results_dir={file}"], 2, "results_dir: '{file}' is a file"),
    (["run", "results_dir="], 2, "results_dir: '' is not a folder"),
    (["run", "run_id=."], 2, "run_id: '.' is not a usable folder name"),
    (["run", "run_id=.."], 2, "run_id: '..' is not a usable folder name"),
    (["run", "run_id=" + "x" * 300], 2, "is not a usable folder name"),
    (["run", "timing.bootstrap_resamples=1000000000"], 2, "timing.bootstrap_resamples"),
    (["run", "timing.min_sample_s=5", "timing.max_time_s=1"], 2, "timing.min_sample_s: 5.0 exceeds"),
    (["run", "timing.flush_l2=true", "timing.cuda_graph=true"], 2, "timing.cuda_graph: cannot be combined with"),
    (["run", "workload=transformer", "workload.foo=1"], 2, "Allowed in workload: activation_checkpointing"),
    (["run", "workload=transformer", "model=tiny", "model.name=a/b", "workload.profile=true"], 2,
     "model.name: 'a/b' is not a plain name"),
    (["run", "workload=inference", "model=tiny", "model.name=..", "backends=[torch]"], 2,
     "model.name: '..' is not a plain name"),
    (["run", "timing.min_samples=1.5"], 2, "timing.min_samples: 1.5 is not an integer. Allowed: an integer > 0"),
    (["run", "workload.transpose_a=maybe"], 2, "workload.transpose_a: 'maybe' is not a boolean. Allowed: true or"),
    (["run", "telemetry.rate_hz=fast"], 2, "telemetry.rate_hz: 'fast' is not a number. Allowed: a number > 0"),
    (["run", "experiment=acceptance", "suite.parts.mamf.kind=x"], 2, "suite.parts.mamf.kind: unknown value 'x'"),
    (["run", "equivalence_margin=1"], 2, "equivalence_margin: 1.0 is out of range. Allowed: a number, 0 <= x < 1"),
    (["run", "device=gpu", "results_dir={dir}"], 2, "device=gpu"),
    (["compare", "{a}"], 2, "at least two bundles"),
    (["compare", "{a}", "{b}", "--margin", "-1"], 2, "--margin -1.0 is out of range"),
    (["compare", "{a}", "{b}", "--noise-floor", "1"], 2, "--noise-floor 1.0 is out of range. Allowed: a number, 0 <="),
    (["compare", "{a}", "{attention}"], 2, "no case matched"),
    (["compare", "{a}", "{b}", "--prices", "{tagged}"], 2, "--prices {tagged}: not a plain YAML mapping of prices"),
    (["compare", "{a}", "{b}", "--prices", "{dir}/nope.yaml"], 2, "--prices {dir}/nope.yaml: No such file"),
    (["compare", "{a}", "{b}", "--price", "cpu=abc"], 2, "--price 'cpu=abc': 'abc' is not a price"),
    (["compare", "{a}", "{b}", "--price", "cpu=-2"], 2, "--price 'cpu=-2': '-2' is not a price. Allowed"),
    (["compare", "{a}", "{b}", "--price", "cpu=inf"], 2, "--price 'cpu=inf': 'inf' is not a price"),
    (["history", "check", "--store", "{dir}/empty-store", "--sigmas", "-1"], 2, "--sigmas: -1 is out of range"),
    (["history", "check", "--store", "{dir}/empty-store", "--min-change", "-1"], 2,
     "--min-change: -1 is out of range. Allowed: a finite number >= 0"),
    (["history", "report", "--store", "{dir}/empty-store", "--sigmas", "inf"], 2, "--sigmas: inf is out of range"),
    (["history", "check", "--store", "{dir}/foreign-store"], 2,
     "prices.parquet is a Parquet file of another schema (no run_id"),
    (["run", "workload=inference", "workload.phases=[]"], 2,
     "workload.phases: is empty. Allowed: one or more of prefill, decode"),
    (["compare", "{a}", "{dir}/nope"], 2, "is not a valid bundle"),
    (["report", "{a}", "-o", "{dir}/missing/r.html"], 2, "does not exist"),
    (["export", "{a}", "-o", "{dir}/rows.xlsx"], 2, "unknown suffix '.xlsx'"),
    (["history", "trend", "--store", "{dir}/nope"], 2, "does not exist"),
    (["history", "trend", "--store", "{dir}/empty-store"], 2, "holds no runs yet"),
    (["history", "check", "--store", "{file}"], 2, "is a file"),
    (["history", "check", "--store", "{dir}/bad-store"], 2, "is not a readable Parquet file"),
    (["history", "check", "--store", "{dir}/empty-store", "--window", "0"], 2, "--window 0 is out of range"),
    (["history", "trend", "--store", "{dir}/bad-store", "-o", "{dir}/missing/t.svg"], 2, "does not exist"),
    (["report", "{a}", "-o", "{dir}"], 2, "report: -o {dir} is a folder"),
    (["export", "{a}", "-o", "{dir}"], 2, "export: -o {dir} is a folder"),
    (["history", "trend", "--store", "{dir}/bad-store", "-o", "{dir}"], 2, "history trend: -o {dir} is a folder"),
    (["history", "report", "--store", "{dir}/bad-store", "-o", "{dir}"], 2, "history report: -o {dir} is a folder"),
    (["validate"], 2, "validate"),
    (["frobnicate"], 2, "unknown command 'frobnicate'"),
]


@pytest.mark.parametrize(("args", "status", "words"), CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_bad_input(files, capsys, args, status, words):
    code = main([a.format(**files) for a in args])
    err = capsys.readouterr().err
    assert code == status, err
    assert words.format(**files) in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not os.path.exists(os.path.join(files["dir"], "results"))


def test_a_number_is_a_run_id_and_a_used_run_id_is_refused(files, capsys):
    args = ["run", *RUN, f"results_dir={files['dir']}/r", "run_id=123"]
    assert main(args) == 0
    assert json.loads(Path(files["dir"], "r", "123", "manifest.json").read_text())["run_id"] == "123"
    capsys.readouterr()
    assert main(args) == 2  # the loser of two runs with one run id
    err = capsys.readouterr().err
    assert "already exists" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_ctrl_c_during_start_up_exits_130_without_a_traceback(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.Popen([sys.executable, "-m", "xmfu", "run", *RUN, f"results_dir={tmp_path}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    time.sleep(1.0)  # inside the imports and Hydra's composition, before any case runs
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err


def test_a_full_disk_keeps_the_last_whole_row_and_exits_1(tmp_path):
    """A file-size limit stands in for a full disk: past it every write fails (EFBIG, as ENOSPC would), and
    the run must leave a bundle that still validates, say so in one paragraph and exit 1."""
    import resource

    from xmfu.harness.results.bundle.validator import load_bundle

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails instead of killing
        # per file: above environment.json (about 6 KB here), reached by cases.jsonl after a few rows (about 3 KB each)
        resource.setrlimit(resource.RLIMIT_FSIZE, (16_000, 16_000))

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    sizes = "[" + ",".join(str(16 + i) for i in range(40)) + "]"
    proc = subprocess.run([sys.executable, "-m", "xmfu", "run", *RUN, f"workload.sizes={sizes}",
                           f"results_dir={tmp_path}"], capture_output=True, text=True, env=env, cwd=tmp_path,
                          preexec_fn=limit, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "The run stopped; the bundle" in proc.stderr
    (folder,) = [p for p in tmp_path.iterdir() if (p / "manifest.json").exists()]
    loaded = load_bundle(folder)
    assert loaded.problems == [] and loaded.bundle.manifest["status"] == "partial"
    assert 0 < len(loaded.bundle.raw_rows) < 40
    assert not list(folder.glob("*.tmp"))


def _ctrl_c_then_wait() -> None:
    """Ctrl-C to this process, then time for its handler to run (here, inside the caller's try)."""
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(1)


def test_ctrl_c_that_a_library_turns_into_its_own_error_still_exits_130(monkeypatch, capsys):
    """Hydra's composition can catch the KeyboardInterrupt of an early Ctrl-C and raise an error of its own with no
    text; that must end as interrupted (130), not as bad input (2) with an empty message."""
    import xmfu.harness.config.hydra_app
    from xmfu.harness.cli.main import main

    def composition_hit_by_ctrl_c(args, registry):
        try:
            _ctrl_c_then_wait()
        except KeyboardInterrupt:
            raise xmfu.harness.config.hydra_app.UsageError("") from None

    monkeypatch.setattr(xmfu.harness.config.hydra_app, "run_command", composition_hit_by_ctrl_c)
    before = signal.getsignal(signal.SIGINT)
    assert main(["run", "workload=matmul"]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is before  # the caller's handler is back


def test_ctrl_c_swallowed_during_start_up_still_interrupts_the_run(monkeypatch, tmp_path, cli):
    """A start-up Ctrl-C whose KeyboardInterrupt something swallowed (it can land in a gc callback; seen about once
    in 80 timed SIGINTs, the run then went on to the end): the run starts interrupted, runs no case, keeps a valid
    partial bundle and exits 130."""
    import xmfu.harness.suites.suite

    def start_up_that_swallows_ctrl_c(args, registry):
        with contextlib.suppress(KeyboardInterrupt):  # as a gc callback would
            _ctrl_c_then_wait()
        return None  # not a suite: the plain run goes on

    monkeypatch.setattr(xmfu.harness.suites.suite, "maybe_run", start_up_that_swallows_ctrl_c)
    proc = cli("run", "backends=[torch]", "workload.sizes=[16]", "timing=quick", f"results_dir={tmp_path}")
    assert proc.returncode == 130, proc.stderr
    assert "interrupted; finished cases are kept" in proc.stderr
    folder = Path(proc.stdout.strip().splitlines()[-1].removeprefix("bundle: "))
    assert validate_bundle(folder) == []
    bundle = read_bundle(folder)
    assert bundle.manifest["status"] == "partial" and bundle.raw_rows == []


def test_ctrl_c_that_cuts_an_import_short_still_exits_130(monkeypatch, capsys):
    """An import interrupted by an early Ctrl-C can fail with an error of its own (seen with `import torch`: exit 1
    and a traceback); that too ends as interrupted. Without a Ctrl-C the same error is not hidden."""
    import xmfu.harness.config.hydra_app
    from xmfu.harness.cli.main import main

    def import_hit_by_ctrl_c(args, registry):
        try:
            _ctrl_c_then_wait()
        except KeyboardInterrupt:
            raise ImportError("partially initialized module") from None

    monkeypatch.setattr(xmfu.harness.config.hydra_app, "run_command", import_hit_by_ctrl_c)
    assert main(["run", "workload=matmul"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "xmfu: interrupted"

    def import_that_fails(args, registry):
        raise ImportError("a real failure")

    monkeypatch.setattr(xmfu.harness.config.hydra_app, "run_command", import_that_fails)
    with pytest.raises(ImportError, match="a real failure"):
        main(["run", "workload=matmul"])


READ_ONLY = "/proc/sys"  # a folder nobody may write in, root included (access(2) says so here)


@pytest.mark.skipif(os.access(READ_ONLY, os.W_OK), reason=f"{READ_ONLY} is writable on this machine")
@pytest.mark.parametrize("command", [["report", "{a}"], ["export", "{a}"], ["history", "trend", "--store", "{store}"],
                                     ["history", "report", "--store", "{store}"]])
def test_an_output_in_a_read_only_folder_is_refused_up_front(files, tmp_path, capsys, command):
    store = tmp_path / "store"
    assert main(["history", "add", files["a"], "--store", str(store)]) == 0
    capsys.readouterr()
    suffix = ".svg" if command[1:2] == ["trend"] else (".csv" if command[0] == "export" else ".html")
    args = [a.format(store=store, **files) for a in command] + ["-o", f"{READ_ONLY}/out{suffix}"]
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and "cannot be written in" in err and len(err.strip().splitlines()) == 1, err


ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    """This checkout's xmfu in a child process (whatever the virtual environment has installed)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))}


def _limited(limit: int):
    """A file-size limit standing in for a full disk: a write past it fails with EFBIG, as ENOSPC would."""
    import resource

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


@pytest.mark.parametrize(("command", "name"), [(["export", "{a}", "-o"], "rows.csv"),
                                               (["export", "{a}", "-o"], "rows.parquet"),
                                               (["report", "{a}", "-o"], "report.html")])
def test_a_write_that_fails_exits_1_and_leaves_nothing_partial(files, tmp_path, command, name):
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_text("yesterday's, kept whole")  # an output that was there before stays as it was
    env = _env()
    proc = subprocess.run([sys.executable, "-m", "xmfu", *[a.format(**files) for a in command], str(out / name)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, preexec_fn=_limited(200),
                          timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "could not write -o" in proc.stderr and "nothing was written there" in proc.stderr
    assert [p.name for p in out.iterdir()] == [name] and (out / name).read_text() == "yesterday's, kept whole"


def test_history_add_into_a_full_store_exits_1_and_leaves_the_store_as_it_was(files, tmp_path):
    store = tmp_path / "store"
    assert main(["history", "add", files["a"], "--store", str(store)]) == 0
    before = sorted(p.name for p in store.iterdir())
    env = _env()
    proc = subprocess.run([sys.executable, "-m", "xmfu", "history", "add", files["b"], "--store", str(store)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, preexec_fn=_limited(200),
                          timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "b could not be written to the store" in proc.stderr
    assert sorted(p.name for p in store.iterdir()) == before
