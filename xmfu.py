"""xmfu's Python API: `xmfu.benchmark(...)` times arbitrary callables through the engine (harness/api.py)."""

from harness import __version__
from harness.api import Result, benchmark

__all__ = ["Result", "__version__", "benchmark"]
