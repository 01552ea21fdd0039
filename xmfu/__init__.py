"""xmfu: realized MFU across vendors. `xmfu.benchmark(...)` times any callables through the engine that `xmfu run`
uses (harness/api.py); `python -m xmfu` is the `xmfu` command.

One import name holds everything: `xmfu.harness` (the engine, machine, results and the front door),
`xmfu.workloads` and `xmfu.kernels`. Every `import xmfu.harness...` runs this file first, so it imports nothing heavy:
the API loads on first use (PEP 562 module `__getattr__`), and `xmfu --help` stays as quick as its own imports.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

__all__ = ["Result", "__version__", "benchmark"]

# A source checkout keeps harness/, workloads/ and kernels/ beside this folder; pyproject.toml's package-dir places
# them inside it only in an installed copy. Where this file is the checkout's (`python -m xmfu` or a script run
# from the checkout's root, an editable install, PYTHONPATH=checkout), its packages are found beside it, so the
# checkout runs its own code whether or not a wheel of xmfu is also installed.
if not os.path.isdir(os.path.join(os.path.dirname(__file__), "harness")):
    __path__.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from xmfu.harness import __version__

if TYPE_CHECKING:
    from xmfu.harness.api import Result, benchmark


def __getattr__(name: str) -> Any:
    if name in ("Result", "benchmark"):
        from xmfu.harness import api

        return getattr(api, name)
    raise AttributeError(f"module 'xmfu' has no attribute {name!r}")
