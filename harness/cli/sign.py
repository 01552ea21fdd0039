"""`xmfu sign BUNDLE --key SSH_KEY` and the signature half of `xmfu validate --verify-signature ALLOWED_SIGNERS`:
OpenSSH's own file signatures (`ssh-keygen -Y sign` / `-Y verify`, OpenSSH 8.0 and later; ssh-keygen(1), section
"-Y sign"), so no new dependency and any buyer's ssh-keygen can check it by hand.

What is signed is SHA256SUMS, which lists the SHA-256 of every file of the bundle (validate requires every file
the format defines to be listed), into SHA256SUMS.sig beside it, under the namespace NAMESPACE (a signature made
for another purpose, e.g. a git commit's, cannot be passed off as a bundle's). By hand:
    ssh-keygen -Y verify -f allowed_signers -I PRINCIPAL -n xmfu-bundle -s SHA256SUMS.sig < SHA256SUMS
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from xmfu.harness.cli.common import Parser, UsageFailure, usage_error, writable_folder
from xmfu.harness.results.schema import SUMS

NAMESPACE = "xmfu-bundle"
SIGNATURE = f"{SUMS}.sig"
TIMEOUT_S = 60  # ssh-keygen asks nothing of a key without a passphrase; an agent or a prompt may take a while
# An armored SSHSIG (OpenSSH PROTOCOL.sshsig) holds the public key, the namespace and the signature: a few hundred
# bytes for ed25519, about 6 KB for a 16384-bit RSA key. A larger file is no signature, and handing a 50 MB one to
# ssh-keygen kept it busy past TIMEOUT_S.
MAX_SIGNATURE_BYTES = 64 * 1024


def _ssh_keygen() -> str | None:
    return shutil.which("ssh-keygen")


def sign(bundle: Path, key: Path) -> str | None:
    """Write bundle/SHA256SUMS.sig with `key`; None, or what went wrong (one line)."""
    tool = _ssh_keygen()
    if tool is None:
        return "ssh-keygen (OpenSSH) is not installed here"
    sums = (bundle / SUMS).read_bytes()
    # From stdin the signature goes to stdout (ssh-keygen(1): "-Y sign ... signatures are written to standard
    # output when the file is -"), so no stale `.sig` is ever asked about.
    try:
        done = subprocess.run([tool, "-Y", "sign", "-f", str(key), "-n", NAMESPACE], input=sums,
                              capture_output=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:  # a key behind a passphrase prompt nobody answers, an agent that hangs
        return f"ssh-keygen -Y sign gave no answer within {TIMEOUT_S} s (a key with a passphrase needs ssh-agent)"
    if done.returncode != 0 or not done.stdout:
        return f"ssh-keygen -Y sign failed: {done.stderr.decode(errors='replace').strip()[:300]}"
    tmp = bundle / f".{SIGNATURE}.tmp"
    try:
        tmp.write_bytes(done.stdout)
        tmp.replace(bundle / SIGNATURE)
    except OSError as exc:  # a full disk, a filesystem gone read-only: no half-written signature stays behind
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        return f"could not write {bundle / SIGNATURE} ({exc.strerror or exc}); the bundle is not signed"
    return None


def verify(bundle: Path, allowed_signers: Path) -> tuple[str | None, str]:
    """(the signer's principal, or None; what was found): SHA256SUMS.sig checked against `allowed_signers` (the
    OpenSSH format: `principal key-type key`, ssh-keygen(1) ALLOWED SIGNERS)."""
    tool = _ssh_keygen()
    if tool is None:
        return None, "ssh-keygen (OpenSSH) is not installed here: the signature is not checked"
    sig = bundle / SIGNATURE
    if not sig.is_file() or sig.is_symlink():
        return None, f"no signature ({SIGNATURE} is missing: xmfu sign BUNDLE --key KEY makes one)"
    if sig.stat().st_size > MAX_SIGNATURE_BYTES:
        return None, (f"{SIGNATURE}: {sig.stat().st_size} bytes, over the {MAX_SIGNATURE_BYTES} bytes of any OpenSSH "
                      "signature: not checked, not a signature")
    try:
        return _verified(tool, bundle, sig, allowed_signers)
    except subprocess.TimeoutExpired:
        return None, f"{SIGNATURE}: ssh-keygen gave no answer within {TIMEOUT_S} s: the signature is not checked"


def _verified(tool: str, bundle: Path, sig: Path, allowed_signers: Path) -> tuple[str | None, str]:
    found = subprocess.run([tool, "-Y", "find-principals", "-s", str(sig), "-f", str(allowed_signers)],
                           capture_output=True, timeout=TIMEOUT_S, check=False)
    principals = found.stdout.decode(errors="replace").split()
    if found.returncode != 0 or not principals:
        return None, f"{SIGNATURE}: not made by a key in {allowed_signers}"
    sums = (bundle / SUMS).read_bytes()
    for principal in principals:
        done = subprocess.run([tool, "-Y", "verify", "-f", str(allowed_signers), "-I", principal, "-n", NAMESPACE,
                               "-s", str(sig)], input=sums, capture_output=True, timeout=TIMEOUT_S, check=False)
        if done.returncode == 0:
            extra = uncovered(bundle)
            if extra:  # the signature vouches for what SHA256SUMS lists, and nothing else in the folder
                shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
                return None, (f"signed by {principal}, but the signature does not cover {shown} (not listed in "
                              f"{SUMS}: added after signing)")
            return principal, f"signed by {principal}"
    return None, f"{SIGNATURE}: the signature does not match {SUMS} (changed after signing) for any key in " \
                 f"{allowed_signers}"


def uncovered(bundle: Path) -> list[str]:
    """What the bundle's folder holds beyond the files SHA256SUMS lists (and the two that say what is signed):
    anything put there after signing, which the signature does not vouch for."""
    listed = {line.partition("  ")[2].strip() for line in (bundle / SUMS).read_text(errors="replace").splitlines()}
    return sorted(p.relative_to(bundle).as_posix() for p in bundle.rglob("*")
                  if p.relative_to(bundle).as_posix() not in listed | {SUMS, SIGNATURE}
                  and (p.is_symlink() or not p.is_dir()))


def cmd_sign(args: Sequence[str]) -> int:
    from xmfu.harness.results.bundle.validator import validate_bundle

    parser = Parser(prog="xmfu sign")
    parser.add_argument("bundle", help="a bundle folder")
    parser.add_argument("--key", required=True, help="the OpenSSH private key to sign with (ssh-keygen -t ed25519)")
    ns = parser.parse_args(args)
    bundle, key = Path(ns.bundle), Path(ns.key)
    if not key.is_file():
        return usage_error(f"sign: --key {ns.key}: no such key file")
    if not (bundle / SUMS).is_file():
        return usage_error(f"sign: {ns.bundle} is not a bundle folder (no {SUMS})")
    try:  # the signature is written beside SHA256SUMS
        writable_folder("sign", "", ns.bundle)
    except UsageFailure as exc:
        return usage_error(f"{exc} ({SIGNATURE} is written in the bundle's folder)")
    problems = validate_bundle(bundle)
    if problems:  # a signature vouches for a bundle; an invalid one gets none
        return usage_error(f"sign: {ns.bundle} is not a valid bundle: {problems[0]} (xmfu validate {ns.bundle})")
    failed = sign(bundle, key)
    if failed:
        print(f"xmfu: sign: {failed}", file=sys.stderr)
        return 1
    print(f"signed: {bundle / SIGNATURE} (namespace {NAMESPACE})")
    return 0
