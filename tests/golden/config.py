"""A run's config for the golden bundles: composed by Hydra as `xmfu run` composes it, with the scripted backends."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def run_config_for(workload: str, overrides: Sequence[str], backends: Sequence[str]) -> Any:
    from tests.golden.rows import TIMING
    from xmfu.harness.config.hydra_app import compose_job
    from xmfu.harness.config.run_settings import explicit_keys, parse_run_config

    job = [f"workload={workload}", *overrides, *(f"timing.{k}={v}" for k, v in TIMING.items()
                                                 if not any(o.startswith(f"timing.{k}=") for o in overrides)),
           f"backends=[{','.join(backends)}]", "telemetry.enabled=false"]
    data, _ = compose_job(job)
    return parse_run_config(data, {workload: list(backends)}, explicit_keys(job))
