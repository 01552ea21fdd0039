"""`import xmfu` from a folder that holds a clone named xmfu, where xmfu is installed editable (issue 42 item 10).

Python's path search runs before setuptools' editable finder (which `pip install -e` appends to sys.meta_path), and
the clone's folder, found on sys.path (the script's own folder), has no `__init__.py`: the search took it for a
namespace package and returned it, empty, so `xmfu.benchmark` raised AttributeError. This finder, first on
sys.meta_path, answers only for the name `xmfu` and only where the path search would give a namespace package (or
nothing): then it returns the editable install's package. A regular package on the path (PYTHONPATH=checkout, a
script in the checkout's root) is still found first, as before.

scripts/install.sh --editable copies this file into the environment's site-packages beside xmfu-checkout-finder.pth,
which imports it at start-up (after setuptools' own .pth, which sorts before it).
"""

from __future__ import annotations

import sys
from importlib.machinery import ModuleSpec, PathFinder
from typing import Any

NAME = "xmfu"
EDITABLE_PREFIX = "__editable___xmfu_"  # setuptools' finder module, __editable___<name>_<version>_finder


class XmfuCheckoutFolder:
    """A sys.meta_path finder: the editable xmfu in place of a namespace package named xmfu."""

    @staticmethod
    def find_spec(fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if fullname != NAME:
            return None
        found = PathFinder.find_spec(fullname)
        if found is not None and found.origin is not None:  # a regular package on the path: it wins, as before
            return None
        for finder in sys.meta_path:
            if getattr(finder, "__module__", "").startswith(EDITABLE_PREFIX):
                return finder.find_spec(fullname, path, target)
        return None


def install() -> None:
    if not any(getattr(f, "__name__", "") == "XmfuCheckoutFolder" for f in sys.meta_path):
        sys.meta_path.insert(0, XmfuCheckoutFolder)


install()
