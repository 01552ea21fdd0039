"""AWS Neuron: the reports `neuron-monitor` streams (one JSON document per line on stdout) and `neuron-ls
--json-output`.

Layout from AWS's "Neuron Monitor User Guide" (aws-neuron/aws-neuron-sdk, tools/neuron-sys-tools/
neuron-monitor-user-guide.rst at 1db4d74): `neuron_runtime_data[].report.neuroncore_counters.neuroncores_in_use`
maps a NeuronCore index to its `neuroncore_utilization` (percent over the period) and `flops` ("number of floating
point operations per second during the captured period", counted by the hardware: xmfu sets it beside its own
model FLOP/s); `execution_stats.latency_stats.device_latency` holds percentiles in seconds ("execution time
exclusively on the Neuron Device"); `memory_used.neuron_runtime_used_bytes.neuron_device` is device memory in
bytes; `system_data.neuron_hw_counters.neuron_devices[]` counts mem/sram ECC events; `neuron_hardware_info` gives
the device type and `logical_neuroncore_config` (the LNC degree) and is always present. Every metric group has
its own `error` string. neuron-monitor reports no power, clocks or temperature, so a Reading stays empty and says
so. `neuron-ls --json-output` (captured on trn1.2xlarge, tools 2.28.23.0) lists devices, core counts, memory and
PCI BDF, and no driver or firmware version.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from xmfu.harness.machine.platform import DeviceInfo
from xmfu.harness.machine.telemetry.base import READING_FIELDS, Probe, Reading, probe_report

NOT_EXPOSED = "neuron-monitor reports no power, energy, clocks, temperature or throttling"
MONITOR_COMMAND = ("neuron-monitor",)


def _group(report: dict[str, Any], name: str) -> dict[str, Any]:
    return (report or {}).get(name) or {}


def core_counters(doc: dict[str, Any], core: int) -> dict[str, Any]:
    """Utilisation (%), hardware-counted FLOP/s and device latency p50 (s) of NeuronCore `core` from one report,
    each None with `errors` naming why when absent."""
    out: dict[str, Any] = {"neuroncore_utilization_pct": None, "hardware_flops_per_s": None,
                           "device_latency_p50_s": None, "device_memory_used_bytes": None, "errors": []}
    for runtime in doc.get("neuron_runtime_data") or []:
        report = runtime.get("report") or {}
        counters = _group(report, "neuroncore_counters")
        found = (counters.get("neuroncores_in_use") or {}).get(str(core))
        if runtime.get("error") or counters.get("error"):
            out["errors"].append(runtime.get("error") or counters.get("error"))
        if found is None:
            continue
        out["neuroncore_utilization_pct"] = found.get("neuroncore_utilization")
        out["hardware_flops_per_s"] = found.get("flops")
        latency = (_group(report, "execution_stats").get("latency_stats") or {}).get("device_latency") or {}
        out["device_latency_p50_s"] = latency.get("p50")
        used = _group(report, "memory_used").get("neuron_runtime_used_bytes") or {}
        out["device_memory_used_bytes"] = used.get("neuron_device")
        break
    else:
        out["errors"].append(f"NeuronCore {core} is not in use by any monitored Neuron application")
    return out


def ecc_counts(doc: dict[str, Any]) -> dict[str, int] | None:
    """Corrected/uncorrected ECC events summed over the devices, or None when the group is absent."""
    devices = _group(doc.get("system_data") or {}, "neuron_hw_counters").get("neuron_devices")
    if devices is None:
        return None
    keys = ("mem_ecc_corrected", "mem_ecc_uncorrected", "sram_ecc_corrected", "sram_ecc_uncorrected")
    return {k: sum(int(d.get(k) or 0) for d in devices) for k in keys}


def hardware_info(doc: dict[str, Any]) -> dict[str, Any]:
    """neuron_hardware_info plus the instance type: device type, core version, LNC, memory per device."""
    info = dict(doc.get("neuron_hardware_info") or {})
    info["instance_type"] = (doc.get("instance_info") or {}).get("instance_type")
    return info


def parse_neuron_ls(text: str) -> list[dict[str, Any]]:
    """`neuron-ls --json-output` as [{"index", "bdf", "cores", "memory_bytes", "processes"}]."""
    return [{"index": d["neuron_device"], "bdf": d.get("bdf"), "cores": d.get("nc_count"),
             "memory_bytes": d.get("memory_size"), "processes": d.get("neuron_processes") or []}
            for d in json.loads(text)]


class NeuronSampler:
    """Keeps the latest neuron-monitor report (a reader thread over its stdout); Reading fields stay None."""

    name = "neuron-monitor"
    available = True
    background = False  # nothing of a Reading is read; the counters come from the report
    energy_wrap_j = None
    reason = NOT_EXPOSED
    processes_reason = "neuron-monitor lists Neuron applications, not the processes on one core"

    def __init__(self, device: DeviceInfo, popen: Callable[..., Any] = subprocess.Popen,
                 command: tuple[str, ...] = MONITOR_COMMAND) -> None:
        self.core = device.index
        self.latest: dict[str, Any] | None = None
        self.parse_errors = 0
        self._proc = popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        for line in self._proc.stdout:
            try:
                self.latest = json.loads(line)
            except ValueError:
                self.parse_errors += 1

    def wait_for_report(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.latest is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.latest is not None

    def read(self) -> Reading:
        return Reading(t=time.perf_counter())

    def counters(self) -> dict[str, Any]:
        """The core's utilisation, hardware FLOP/s, device latency, memory and ECC from the latest report."""
        if self.latest is None:
            return {"errors": ["no neuron-monitor report yet"]}
        return {**core_counters(self.latest, self.core), "ecc": ecc_counts(self.latest)}

    def static(self) -> dict[str, Any]:
        return {"api": "neuron-monitor", "hardware": hardware_info(self.latest or {}), "unreadable": self.reason,
                "counters": self.counters(), "clocks": self._clocks()}

    def _clocks(self) -> dict[str, Any]:
        return {"locked": None, "detail": {}, "source": "neuron-monitor", "reason": NOT_EXPOSED}

    def processes(self) -> list[dict[str, Any]] | None:
        return None

    def close(self) -> None:
        self._proc.terminate()

    def probe(self) -> dict[str, dict[str, Any]]:
        fields = {k: Probe(source="neuron-monitor", reason=NOT_EXPOSED) for k in READING_FIELDS}
        identity = Probe({"resolved_by": "ordinal", "id": self.core}, "neuron-monitor neuroncores_in_use")
        return probe_report(fields, identity, self._clocks(), None, self.processes_reason, None)
