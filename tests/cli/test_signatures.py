"""`xmfu sign` and `validate --verify-signature` with OpenSSH's ssh-keygen (tests skip where it is missing): a
signature file larger than any signature is refused before ssh-keygen sees it, and an ssh-keygen that gives no
answer is one problem, not a traceback (issue 42 item 14); a file added to a signed bundle after signing is named,
and fails `--verify-signature` (issue 42 item 15)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.results.rows import MANIFEST, valid_row
from xmfu.harness.cli import sign
from xmfu.harness.results.bundle.writer import BundleWriter

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen (OpenSSH) is not installed")


def _bundle(folder: Path) -> Path:
    writer = BundleWriter(folder, {**MANIFEST, "run_id": folder.name}, "", {})
    writer.append(valid_row(run_id=folder.name, case_id="matmul-fp32-16", workload="matmul"),
                  {"case_id": "matmul-fp32-16", "backend": "torch", "samples": [1e-3, 1.1e-3, 0.9e-3]})
    writer.finalize("complete")
    return folder


@pytest.fixture
def signed(tmp_path) -> tuple[Path, Path]:
    """(a signed bundle, the allowed-signers file that names its key)."""
    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "lab", "-f", str(key)], check=True)
    allowed = tmp_path / "allowed_signers"
    allowed.write_text("lab@example.com " + " ".join(Path(f"{key}.pub").read_text().split()[:2]) + "\n")
    bundle = _bundle(tmp_path / "b")
    assert sign.sign(bundle, key) is None
    return bundle, allowed


def test_a_signed_bundle_verifies(signed):
    assert sign.verify(*signed) == ("lab@example.com", "signed by lab@example.com")


def test_a_signature_file_larger_than_any_signature_is_refused_before_ssh_keygen(signed, monkeypatch):
    bundle, allowed = signed
    (bundle / sign.SIGNATURE).write_bytes((bundle / sign.SIGNATURE).read_bytes() + b"A" * 4000)
    monkeypatch.setattr(sign, "MAX_SIGNATURE_BYTES", 2000)  # the real bound is 64 KiB: a 50 MB file is far past it
    ran = []
    monkeypatch.setattr(sign.subprocess, "run", lambda *a, **k: ran.append(a))
    principal, said = sign.verify(bundle, allowed)
    assert principal is None and "over the 2000 bytes of any OpenSSH signature" in said
    assert ran == []


def test_an_ssh_keygen_that_gives_no_answer_is_one_problem(signed, monkeypatch):
    def hangs(command, **kwargs):
        raise subprocess.TimeoutExpired(command, kwargs.get("timeout"))

    monkeypatch.setattr(sign.subprocess, "run", hangs)
    assert sign.verify(*signed) == (None, f"{sign.SIGNATURE}: ssh-keygen gave no answer within 60 s: the signature "
                                          "is not checked")
    said = sign.sign(signed[0], Path("key"))
    assert said is not None and "no answer within 60 s" in said


def test_a_file_added_after_signing_is_named_and_fails_verification(signed, cli):
    bundle, allowed = signed
    (bundle / "results.md").write_text("# the numbers, as the seller would like them read\n")
    (bundle / "more").mkdir()
    (bundle / "more" / "note.txt").write_text("x")
    principal, said = sign.verify(bundle, allowed)
    assert principal is None
    assert said == ("signed by lab@example.com, but the signature does not cover more/note.txt, results.md (not "
                    "listed in SHA256SUMS: added after signing)")
    checked = cli("validate", "--verify-signature", str(allowed), str(bundle))
    assert checked.returncode == 1 and "does not cover more/note.txt, results.md" in checked.stdout
    assert f"{bundle}: valid" not in checked.stdout
