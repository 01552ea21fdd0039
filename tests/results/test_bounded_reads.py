"""Reading a bundle costs memory in proportion to the bundle, never to the size limit, and a record nested deeper
than any bundle writes is a named problem, never a RecursionError (issue 26, items 9 and 11)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.results.rows import valid_row
from xmfu.harness.results.bundle import files, records, validator
from xmfu.harness.results.bundle.validator import validate_bundle
from xmfu.harness.results.bundle.writer import BundleWriter
from xmfu.harness.results.schema import CASES, SUMS

CHECKOUT = Path(__file__).resolve().parents[2]
MANIFEST = {"run_id": "r", "created": "2026-11-25T00:00:00.000000Z", "xmfu_version": "0", "git_sha": None,
            "argv": [], "overrides": [],
            "comparability_key": "k"}


@pytest.fixture
def bundle(tmp_path):
    writer = BundleWriter(tmp_path / "run", MANIFEST, "a: 1\n", {"host": {}})
    writer.append(valid_row([1.0, 1.1], flops=2.0, peak=None), {"case_id": "c1", "backend": "torch",
                                                                 "samples": [1.0, 1.1]})
    writer.finalize("complete")
    return tmp_path / "run"


def test_validate_runs_under_a_virtual_memory_limit_smaller_than_the_file_limit(bundle):
    # `ulimit -v 4000000` (about 3.8 GiB), as the battery ran it: a reader that asks for a buffer of the
    # whole 4 GiB limit per file dies with MemoryError; one that reads in chunks needs only what the files hold.
    code = textwrap.dedent(f"""
        import resource, sys
        from xmfu.harness.results.bundle.validator import validate_bundle
        limit = 4_000_000 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        problems = validate_bundle({str(bundle)!r})
        print("problems", problems)
        sys.exit(1 if problems else 0)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                          cwd=CHECKOUT)  # this checkout's xmfu, not an installed one
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]


def test_a_file_that_grows_past_the_limit_while_read_is_refused(bundle, monkeypatch):
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 64)
    monkeypatch.setattr(files, "CHUNK_BYTES", 16)
    with pytest.raises(validator._Reject, match="over the 64 byte limit"):
        validator._read(bundle, CASES)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [100_000, 1_000_000])
def test_a_deeply_nested_line_is_a_named_problem_not_a_recursion_error(bundle, depth):
    # A forged cases.jsonl whose line nests arrays deeper than Python's recursion limit; SHA256SUMS rewritten to
    # match, so only the nesting is wrong.
    import hashlib

    line = '{"x": ' + _nested(depth) + "}\n"
    (bundle / CASES).write_text(line)
    sums = [(bundle / SUMS).read_text().splitlines()]
    rewritten = []
    for entry in sums[0]:
        digest, _, name = entry.partition("  ")
        if name == CASES:
            digest = hashlib.sha256(line.encode()).hexdigest()
        rewritten.append(f"{digest}  {name}\n")
    (bundle / SUMS).write_text("".join(rewritten))
    problems = validate_bundle(bundle)
    assert any(f"{CASES} line 1" in p and "nested" in p for p in problems), problems


def test_nesting_a_real_bundle_uses_is_accepted(bundle):
    # the deepest record a bundle writes (a row's params, its telemetry summary) is a handful of levels
    assert records.nesting_depth(json.dumps({"a": [{"b": [[1, 2]]}]}).encode()) == 5
    assert validate_bundle(bundle) == []


def _resum(bundle: Path, name: str) -> None:
    """SHA256SUMS rewritten for `name` as it now is (a forger's or a long run's file, checksummed)."""
    import hashlib

    digest = hashlib.sha256((bundle / name).read_bytes()).hexdigest()
    lines = [(digest + "  " + name) if line.endswith(f"  {name}") else line
             for line in (bundle / SUMS).read_text().splitlines()]
    (bundle / SUMS).write_text("\n".join(lines) + "\n")


def test_telemetry_is_checked_as_it_streams_holding_a_chunk_not_the_file(bundle, monkeypatch):
    """issue 42 item 14: a 3 GB telemetry.jsonl under `ulimit -v 6G` died with MemoryError (read in chunks, then
    joined: every byte twice). Here an 8 MB file, read in 64 KiB chunks, must cost well under its size in memory,
    and a bad reading in it is still named by its line."""
    import tracemalloc

    reading = json.dumps({"case_id": "c1", "t": 1.0, "power_w": 300.0, "power_source": "a long note " * 80})
    lines = [reading] * 9_000  # lines of about 1 KB: the bytes are what matters, and fewer lines check faster
    lines[4_100] = json.dumps({"case_id": "c1", "t": "late"})
    (bundle / "telemetry.jsonl").write_text("\n".join(lines) + "\n")
    _resum(bundle, "telemetry.jsonl")
    assert (bundle / "telemetry.jsonl").stat().st_size > 8_500_000
    monkeypatch.setattr(files, "CHUNK_BYTES", 64 * 1024)
    tracemalloc.start()
    try:
        problems = validate_bundle(bundle)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert problems == ["telemetry.jsonl line 4101: t: expected `float`, got `str`"], problems
    assert peak < 2_000_000, peak


def test_a_streamed_line_longer_than_any_record_is_one_problem(bundle, monkeypatch):
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 1000)
    monkeypatch.setattr(files, "CHUNK_BYTES", 256)
    reading = json.dumps({"case_id": "c1", "t": 1.0})
    (bundle / "telemetry.jsonl").write_text(f"{reading}\n{'x' * 5000}\n{reading}\n")
    _resum(bundle, "telemetry.jsonl")
    assert validate_bundle(bundle) == ["telemetry.jsonl line 2: longer than 1000 bytes (no record is)"]
    (bundle / "telemetry.jsonl").write_text(f"{reading}\n{reading}")  # no newline at the end
    _resum(bundle, "telemetry.jsonl")
    assert validate_bundle(bundle) == ["telemetry.jsonl: last line is incomplete (truncated)"]
