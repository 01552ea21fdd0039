"""Whether a sampler's energy counter can be trusted, checked once at the start of a run, and which source a row's
energy then comes from.

The check follows Zeus (ml-energy/zeus zeus/device/gpu/amd.py, AMDGPUs._init_gpus): read power, read the counter,
wait 0.5 s, read the counter again; the counter's difference against power x time. A ratio outside 0.1-10 disables
the counter (amdsmi_get_energy_count reads far off on some AMD parts: ROCm/amdsmi issue #38), and so does a power
reading under 1 mJ over the wait (Zeus's floor): such a device reports no power of its own (Zeus: the odd chiplet of
an MI250/MI250X, whose power the even one reports for both), so neither its counter nor its power readings measure
it and its rows say `not measured`. A sampler that gives energy and no power (RAPL) keeps its counter unchecked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from xmfu.harness.machine.telemetry.base import Reading, Sampler

CHECK_S = 0.5  # Zeus's wait between the two counter readings
RATIO_LOW, RATIO_HIGH = 0.1, 10.0  # Zeus's loose bounds on counter / (power x time)
MIN_EXPECTED_J = 0.001  # Zeus: expected energy under 1 mJ cannot check the counter
# The counter each sampler reads (its energy_j) and what a row's energy then measures.
COUNTERS = {"nvml": "nvmlDeviceGetTotalEnergyConsumption (mJ)",
            "amdsmi": "amdsmi_get_energy_count accumulator x counter_resolution (uJ)",
            "hlml": "hlmlDeviceGetTotalEnergyConsumption (mJ)", "xpu-smi": "xpu-smi dump GPU Energy Consumed (J)",
            "cpu": "RAPL intel-rapl:N/energy_uj (uJ)"}
SCOPES = {"cpu": "cpu package"}  # every other sampler measures one accelerator: "device"


@dataclass(frozen=True)
class CounterCheck:
    """What the start-up check found: whether the counter is used, whether power readings are, and why."""

    counter: bool  # the energy counter is used for rows' energy
    power: bool  # power readings may be integrated where the counter is not used
    scope: str  # device or cpu package
    counter_name: str | None
    reason: str | None  # why the counter (or power) is not used, or why the counter was not checked
    ratio: float | None = None  # counter / (power x time) over the check
    expected_j: float | None = None
    measured_j: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _delta(a: Reading, b: Reading, wrap_j: float | None) -> float | None:
    if a.energy_j is None or b.energy_j is None:
        return None
    d = b.energy_j - a.energy_j
    return d + wrap_j if d < 0 and wrap_j else (d if d >= 0 else None)


def check(sampler: Sampler | None, wait_s: float | None = None,
          sleep: Callable[[float], Any] = time.sleep) -> CounterCheck:
    """Read the sampler twice `wait_s` apart and judge its counter as Zeus does."""
    name = getattr(sampler, "name", None)
    scope, counter_name = SCOPES.get(str(name), "device"), COUNTERS.get(str(name), "the sampler's energy counter")
    if sampler is None or not sampler.available:
        why = getattr(sampler, "reason", None) or "telemetry disabled"
        return CounterCheck(False, False, scope, None, f"no telemetry: {why}")
    try:
        first = sampler.read()
        if first.energy_j is None:
            return CounterCheck(False, first.power_w is not None, scope, None,
                                f"no energy counter readable: {_why_no_energy(sampler)}")
        if first.power_w is None:
            return CounterCheck(True, False, scope, counter_name, "counter not checked: no power reading to check "
                                                                  "it against")
        sleep(CHECK_S if wait_s is None else wait_s)
        second = sampler.read()
    except Exception as exc:  # a failed read at start: rows then find what their own readings give
        return CounterCheck(False, True, scope, None, f"counter check failed: {type(exc).__name__}: {exc}")
    return _judge(first, second, getattr(sampler, "energy_wrap_j", None), scope, counter_name)


def _why_no_energy(sampler: Sampler) -> str:
    try:
        return str(sampler.probe()["energy_j"]["reason"] or "the sampler gives no reason")
    except Exception as exc:  # a probe that fails says so; the run goes on
        return f"probe failed: {type(exc).__name__}: {exc}"


def _judge(first: Reading, second: Reading, wrap_j: float | None, scope: str, name: str) -> CounterCheck:
    seconds = second.t - first.t
    expected = first.power_w * seconds if first.power_w is not None else 0.0
    measured = _delta(first, second, wrap_j)
    if expected < MIN_EXPECTED_J:
        return CounterCheck(False, False, scope, name, f"the device reports no power of its own ({first.power_w} W "
                            f"at start, {expected * 1e3:.3g} mJ expected over {seconds:.3g} s): neither its counter "
                            "nor its power readings measure it", None, expected, measured)
    if measured is None:
        return CounterCheck(False, True, scope, name, "counter disabled: it went backwards during the check",
                            None, expected, None)
    ratio = measured / expected
    if not RATIO_LOW < ratio < RATIO_HIGH:
        return CounterCheck(False, True, scope, name, f"counter disabled: it gave {measured:.4g} J where power x time "
                            f"gives {expected:.4g} J over {seconds:.3g} s (ratio {ratio:.3g}, outside "
                            f"{RATIO_LOW}-{RATIO_HIGH}); power readings are integrated instead", ratio, expected,
                            measured)
    return CounterCheck(True, True, scope, name, None, ratio, expected, measured)
