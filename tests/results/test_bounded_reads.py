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
from xmfu.harness.results.bundle import validator
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
    monkeypatch.setattr(validator, "MAX_FILE_BYTES", 64)
    monkeypatch.setattr(validator, "CHUNK_BYTES", 16)
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
    assert validator.nesting_depth(json.dumps({"a": [{"b": [[1, 2]]}]}).encode()) == 5
    assert validate_bundle(bundle) == []
