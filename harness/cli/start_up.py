"""The process's first handlers: from the moment xmfu's own code runs until `run_as_module` installs the command's,
SIGINT and SIGTERM end the process as an interrupted run does, 130 and no traceback (README: an interrupt exits
130, whichever signal). Both entries install them before their imports: `python -m xmfu` (xmfu/__main__.py) and
the `xmfu` console script, whose generated file imports harness/cli/main.py first (`guard_the_console_script`, at
that module's top). Before either, Python's own start-up (site, .pth files) cannot be guarded by a program.
Nothing is written before the command's handlers are in place, so nothing is lost."""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading

CONSOLE_SCRIPT = "xmfu"  # pyproject.toml [project.scripts]


def _interrupted_while_starting(signum: int, frame: object) -> None:
    os._exit(130)


def guard() -> None:
    """The start-up handlers; and the cyclic garbage collector paused for the imports that follow (they make
    modules, classes and functions, which live to the end, and no garbage: its collections during them walked
    every object made so far for nothing, about 6% of the imports' CPU). `run_as_module` resumes it and hands
    what the imports made to its permanent generation, never walked again."""
    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, _interrupted_while_starting)
        gc.disable()


def guard_the_console_script() -> None:
    """`guard()` where this process is the `xmfu` console script and no handler of its own is in place yet (an
    import by a test, a notebook or `python -m xmfu`, which guards itself, leaves the handlers as they are).
    Before it, a Ctrl-C during the console script's imports (a second in all on a loaded machine) printed a
    KeyboardInterrupt traceback."""
    if os.path.basename(sys.argv[0] if sys.argv else "") == CONSOLE_SCRIPT \
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        guard()
