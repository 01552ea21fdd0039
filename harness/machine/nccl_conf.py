"""The NCCL/RCCL config files a run's collectives read, as environment.json records them.

NCCL reads `NAME=value` lines (a line starting with `#` is a comment) from the file `NCCL_CONF_FILE` names when it
is set and not empty, else from `~/.nccl.conf` (the home directory of the user, from getpwuid), and then from
`/etc/nccl.conf`; each line becomes an environment variable (NVIDIA/nccl src/misc/param.cc, setEnvFile and
initEnvFunc, as of commit 081eafa; RCCL is a fork that keeps the file). Those settings change algorithms as much as
the NCCL_* variables do, so the record keeps them.

The path is the user's, so nothing in it is trusted: only a regular file is opened for reading (never a device such
as /dev/zero, whose read never ends, nor a FIFO, whose open or read blocks), within MAX_BYTES, as UTF-8 text; and
only the lines that set an allow-listed variable (the same pattern as the environment's variables) are copied.
Everything else is counted, never copied: `NCCL_CONF_FILE=/etc/shadow` leaves its size, digest and a count of lines
in the report, not its contents.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MAX_BYTES = 64 * 1024  # NCCL keeps at most 1023 characters of a value (param.cc); real files are a few lines
SYSTEM_FILE = "/etc/nccl.conf"


def home_dir() -> str:
    """The user's home directory as NCCL finds it: the password database, not $HOME (param.cc, userHomeDir)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:  # no entry for this uid (some containers): NCCL then reads no ~/.nccl.conf
        return ""


def paths(environ: Mapping[str, str]) -> list[str]:
    """The files NCCL reads, in its order."""
    chosen = environ.get("NCCL_CONF_FILE") or (os.path.join(home_dir(), ".nccl.conf") if home_dir() else "")
    return [p for p in (chosen, SYSTEM_FILE) if p]


def _read_bounded(fd: int) -> bytes | None:
    """At most MAX_BYTES of the file; None when it holds more (it may have grown since fstat)."""
    chunks, total = [], 0
    while chunk := os.read(fd, MAX_BYTES + 1 - total):
        chunks.append(chunk)
        total += len(chunk)
        if total > MAX_BYTES:
            return None
    return b"".join(chunks)


def _settings(text: str, allowed: re.Pattern[str]) -> dict[str, Any]:
    """The allow-listed `NAME=value` lines, as NCCL splits them (at the first `=`), and a count of the others."""
    settings, others = {}, 0
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if sep and allowed.match(name):
            settings[name] = value
        else:
            others += 1
    return {"settings": settings, "other_lines": others}


def read(path: str, allowed: re.Pattern[str]) -> dict[str, Any] | None:
    """The record of one config file, or None when there is none to open (absent, unreadable)."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; the fstat below refuses it
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return {"note": "not a regular file: not read"}
        if info.st_size > MAX_BYTES or (data := _read_bounded(fd)) is None:
            return {"bytes": info.st_size, "note": f"over {MAX_BYTES} bytes: not read"}
    except OSError as exc:
        return {"note": f"could not be read ({exc.strerror or exc})"}
    finally:
        os.close(fd)
    out: dict[str, Any] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return {**out, "note": "not UTF-8 text: only its size and digest are recorded"}
    return {**out, **_settings(text, allowed)}


def config_files(environ: Mapping[str, str], allowed: re.Pattern[str]) -> dict[str, dict[str, Any]]:
    """Path -> record, for each file NCCL would read that exists."""
    found = {}
    for path in paths(environ):
        record = read(path, allowed)
        if record is not None:
            found[str(Path(path))] = record
    return found
