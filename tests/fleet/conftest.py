"""What the fleet tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from xmfu.harness.cli.formulas import install
from xmfu.harness.results.bundle import validator


@pytest.fixture
def formulas() -> Iterator[None]:
    """Bundles checked against the workloads' formulas, as `xmfu` checks them; other tests get back what they had."""
    before = validator._FORMULAS[0], validator._RUN_FORMULA[0]
    install()
    yield
    validator.use_formulas(*before)
