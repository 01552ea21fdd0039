"""The NCCL config files in environment.json: only regular files, read within a bound, as text, and only the
allow-listed settings they hold (issue 26, item 10). NCCL's own reading, copied in nccl_conf's docstring: NVIDIA/nccl
src/misc/param.cc (setEnvFile, initEnvFunc)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from xmfu.harness.machine import nccl_conf
from xmfu.harness.machine.environment import nccl_config_files

CHECKOUT = Path(__file__).resolve().parents[2]


def _in_a_bounded_process(conf: str, home: str) -> subprocess.CompletedProcess:
    # /dev/zero read whole exhausts memory and a FIFO blocks forever: run where both are bounded (2 GiB of address
    # space, 60 s), so a regression fails the test instead of the machine.
    code = textwrap.dedent(f"""
        import json, resource
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
        from xmfu.harness.machine.environment import nccl_config_files
        print(json.dumps(nccl_config_files({{"NCCL_CONF_FILE": {conf!r}}}), default=str))
    """)
    env = {**os.environ, "HOME": home, "PYTHONPATH": str(CHECKOUT)}  # this checkout's xmfu
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False,
                          env=env)


def test_dev_zero_is_not_read(tmp_path):
    done = _in_a_bounded_process("/dev/zero", str(tmp_path))
    assert done.returncode == 0, done.stderr[-1500:]
    record = json.loads(done.stdout)["/dev/zero"]
    assert "settings" not in record and "not a regular file" in record["note"]


def test_a_fifo_does_not_hang_the_run(tmp_path):
    fifo = tmp_path / "nccl.fifo"
    os.mkfifo(fifo)
    try:
        done = _in_a_bounded_process(str(fifo), str(tmp_path))
    except subprocess.TimeoutExpired:
        pytest.fail("reading NCCL_CONF_FILE=<a FIFO> blocked")
    assert done.returncode == 0, done.stderr[-1500:]
    assert "not a regular file" in json.loads(done.stdout)[str(fifo)]["note"]


def test_a_binary_file_is_recorded_by_its_digest(tmp_path):
    path = tmp_path / "nccl.bin"
    data = bytes(range(256)) * 4
    path.write_bytes(data)
    record = nccl_config_files({"NCCL_CONF_FILE": str(path)})[str(path)]
    assert record == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                      "note": "not UTF-8 text: only its size and digest are recorded"}


def test_only_allow_listed_settings_are_copied(tmp_path):
    # /etc/shadow's shape, and a credentials file's, beside real NCCL lines: only the NCCL_* lines reach the record
    path = tmp_path / "mixed.conf"
    text = ("root:$6$salt$hash:19000:0:99999:7:::\n# a comment\nNCCL_ALGO=Ring\naws_secret_access_key=SECRET\n"
            "NCCL_PROTO=Simple\nnot a setting\n")
    path.write_text(text)
    record = nccl_config_files({"NCCL_CONF_FILE": str(path)})[str(path)]
    assert record["settings"] == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}
    assert record["other_lines"] == 3  # the shadow line, the credential, the stray text; comments are not counted
    assert record["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert "SECRET" not in json.dumps(record) and "$6$" not in json.dumps(record)


def test_a_file_over_the_bound_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(nccl_conf, "MAX_BYTES", 100)
    path = tmp_path / "big.conf"
    path.write_text("NCCL_ALGO=Ring\n" * 50)
    record = nccl_config_files({"NCCL_CONF_FILE": str(path)})[str(path)]
    assert record == {"bytes": 750, "note": "over 100 bytes: not read"}


def test_the_files_nccl_reads_in_its_order(tmp_path, monkeypatch):
    # NCCL_CONF_FILE when set, else ~/.nccl.conf; /etc/nccl.conf in either case (param.cc, initEnvFunc)
    monkeypatch.setattr(nccl_conf, "home_dir", lambda: str(tmp_path))
    (tmp_path / ".nccl.conf").write_text("NCCL_ALGO=Tree\n")
    assert nccl_conf.paths({}) == [str(tmp_path / ".nccl.conf"), "/etc/nccl.conf"]
    assert nccl_conf.paths({"NCCL_CONF_FILE": "/x.conf"}) == ["/x.conf", "/etc/nccl.conf"]
    found = nccl_config_files({})
    assert found[str(tmp_path / ".nccl.conf")]["settings"] == {"NCCL_ALGO": "Tree"}
