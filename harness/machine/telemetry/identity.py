"""Find the vendor-library handle of the device that is timed, by what the framework says it is.

CUDA and HIP ordinals are renumbered by CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES and
Slurm's GPU binding, and NVML / amdsmi number devices their own way, so a handle looked up by ordinal can be
another GPU's. The handle is looked up by UUID or PCI bus id from the framework's device properties; the
ordinal is used only when the framework gave neither, and the identity record then says so. A known identity
that the library cannot find is an error (no telemetry), never a silent fall back to the ordinal.

Each lookup returns (handle, identity) where identity is
{"resolved_by": "uuid" | "pci_bus_id" | "pci_bus_id (scan)" | "ordinal", "requested": {"uuid", "pci_bus_id",
"index"}, "uuid", "serial", "pci_bus_id" (as the library reports them for the handle found), "tried": [failed
lookups], "warning": str | None}.
"""

from __future__ import annotations

import os
import re
from typing import Any

from xmfu.harness.machine.platform import DeviceInfo

VISIBLE = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "SLURM_STEP_GPUS",
           "SLURM_JOB_GPUS")


def parse_pci(text: str | None) -> tuple[int, int, int, int] | None:
    """(domain, bus, device, function) from "dddd:bb:dd.f", "dddddddd:bb:dd.f" (NVML's busId) or "bb:dd.f"."""
    if not text:
        return None
    m = re.fullmatch(r"(?:([0-9a-fA-F]+):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])", text.strip())
    if not m:
        return None
    domain, bus, device, function = m.groups()
    return int(domain or "0", 16), int(bus, 16), int(device, 16), int(function, 16)


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    value = str(value).strip().strip("\0") if value is not None else ""
    return None if value in ("", "N/A") else value


def _record(resolved_by: str, device: DeviceInfo, tried: list[str], warning: str | None = None) -> dict[str, Any]:
    return {"resolved_by": resolved_by, "requested": {"uuid": device.uuid, "pci_bus_id": device.pci_bus_id,
                                                      "index": device.index},
            "uuid": None, "serial": None, "pci_bus_id": None, "tried": tried, "warning": warning}


def _ordinal_warning(library: str, index: int) -> str:
    env = ", ".join(f"{k}={os.environ[k]}" for k in VISIBLE if k in os.environ) or "none of " + "/".join(VISIBLE[:3])
    return (f"the framework gave no UUID or PCI bus id for device {index}: {library} index {index} is read, which "
            f"need not be the timed GPU ({env} set; CUDA_DEVICE_ORDER=PCI_BUS_ID or UUIDs in CUDA_VISIBLE_DEVICES "
            f"let xmfu map a CUDA device)")


def _ask(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported / AmdSmiLibraryException: that part of the record stays None
        return None


def nvml_uuid(uuid: str) -> str:
    """NVML wants "GPU-<uuid>" (or a MIG instance's "MIG-<uuid>"); torch's string has no prefix."""
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def nvml_handle(nvml: Any, device: DeviceInfo) -> tuple[Any, dict[str, Any]]:
    """nvmlDeviceGetHandleByUUID, then nvmlDeviceGetHandleByPciBusId (pynvml's name for ..._v2), then the
    ordinal only when neither identity is known (nvidia-ml-py 12.560.30 / 13.615.71 pynvml.py)."""
    tried: list[str] = []
    lookups = [("uuid", "nvmlDeviceGetHandleByUUID", nvml_uuid(device.uuid) if device.uuid else None),
               ("pci_bus_id", "nvmlDeviceGetHandleByPciBusId", device.pci_bus_id)]
    for resolved_by, fn, key in lookups:
        if key is None:
            continue
        try:
            handle = getattr(nvml, fn)(key)
        except Exception as exc:  # NVMLError_NotFound, _InvalidArgument, an older pynvml without the call
            tried.append(f"{fn}({key}): {type(exc).__name__}: {exc}")
            continue
        return handle, _nvml_facts(nvml, handle, _record(resolved_by, device, tried))
    if tried:
        raise LookupError("the timed GPU was not found by NVML: " + "; ".join(tried))
    mapped = _nvml_visible(nvml, device, tried)
    if mapped is not None:
        handle, resolved_by, how = mapped
        record = _record(resolved_by, device, tried)
        record["mapping"] = how
        return handle, _nvml_facts(nvml, handle, record)
    handle = nvml.nvmlDeviceGetHandleByIndex(device.index)
    return handle, _nvml_facts(nvml, handle, _record("ordinal", device, tried, _ordinal_warning("NVML", device.index)))


def _runtime_ordinal(device: DeviceInfo) -> int:
    return device.hardware_id if device.hardware_id is not None else device.index


def _nvml_visible(nvml: Any, device: DeviceInfo, tried: list[str]) -> tuple[Any, str, str] | None:
    """The handle of the CUDA runtime's device `hardware_id` (else `index`) found through CUDA's own numbering:
    CUDA_VISIBLE_DEVICES lists "integer indices or UUID strings" (abbreviated UUIDs allowed, "enough digits from
    the beginning ... to uniquely identify that GPU"), and integers count devices in CUDA_DEVICE_ORDER:
    FASTEST_FIRST by default, "PCI_BUS_ID orders devices by PCI bus ID in ascending order" (CUDA Programming
    Guide, CUDA Environment Variables). NVML's own index "may not correlate with ... the CUDA device index"
    (nvmlDeviceGetHandleByIndex), so an integer is matched against the PCI-ordered list of every NVML device, and
    only under PCI_BUS_ID: FASTEST_FIRST's order is a heuristic xmfu cannot repeat. None where no mapping holds."""
    env, ordinal = os.environ, _runtime_ordinal(device)
    visible = [e.strip() for e in env["CUDA_VISIBLE_DEVICES"].split(",")] if "CUDA_VISIBLE_DEVICES" in env else None
    if visible is not None and not 0 <= ordinal < len(visible):
        tried.append(f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']} has no entry {ordinal}")
        return None
    entry = visible[ordinal] if visible is not None else str(ordinal)
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    said = f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}" if visible is not None else "no CUDA_VISIBLE_DEVICES"
    if entry.startswith(("GPU-", "MIG-")):
        found = [h for h in handles if (_text(_ask(nvml.nvmlDeviceGetUUID, h)) or "").startswith(entry)]
        if len(found) == 1:
            return found[0], "uuid (CUDA_VISIBLE_DEVICES)", f"CUDA device {ordinal} is {entry} ({said})"
        tried.append(f"{entry} from CUDA_VISIBLE_DEVICES matches {len(found)} NVML device(s)")
        return None
    if not entry.isdigit():
        tried.append(f"CUDA_VISIBLE_DEVICES entry {entry!r} is neither an index nor a UUID")
        return None
    if env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        tried.append("CUDA numbers devices fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID")
        return None
    by_pci = sorted((p, h) for h in handles if (p := parse_pci(_text(getattr(_ask(nvml.nvmlDeviceGetPciInfo, h),
                                                                               "busId", None)))))
    if int(entry) >= len(by_pci) or len(by_pci) != len(handles):
        tried.append(f"CUDA device {entry} in PCI order: NVML gives {len(by_pci)} PCI bus id(s) of {len(handles)}")
        return None
    return (by_pci[int(entry)][1], "pci_bus_id (CUDA_VISIBLE_DEVICES, PCI_BUS_ID order)",
            f"CUDA device {ordinal} is physical device {entry} in PCI bus order ({said}, CUDA_DEVICE_ORDER=PCI_BUS_ID)")


def _nvml_facts(nvml: Any, handle: Any, record: dict[str, Any]) -> dict[str, Any]:
    pci = _ask(nvml.nvmlDeviceGetPciInfo, handle)
    record.update(uuid=_text(_ask(nvml.nvmlDeviceGetUUID, handle)),
                  serial=_text(_ask(nvml.nvmlDeviceGetSerial, handle)),
                  pci_bus_id=_text(getattr(pci, "busId", None)))
    return _cross_check(record)


def _cross_check(record: dict[str, Any]) -> dict[str, Any]:
    """Found by UUID: does the library's PCI bus id agree with the framework's? Say so where it does not."""
    wanted, found = parse_pci(record["requested"]["pci_bus_id"]), parse_pci(record["pci_bus_id"])
    if wanted and found and wanted[:3] != found[:3]:
        note = f"the device found has PCI bus id {record['pci_bus_id']}, the framework's is " \
               f"{record['requested']['pci_bus_id']}"
        record["warning"] = f"{record['warning']}; {note}" if record["warning"] else note
    return record


def amdsmi_handle(smi: Any, device: DeviceInfo) -> tuple[Any, dict[str, Any]]:
    """amdsmi_get_processor_handle_from_bdf, else the one handle whose amdsmi_get_gpu_device_bdf has the same
    domain, bus and device (torch reports no PCI function, and the C lookup wants it to match exactly: amdsmi
    src/amd_smi/amd_smi.cc at rocm-6.1.0), else the ordinal only when no PCI bus id is known.

    HIP's UUID is not used: amdsmi_get_gpu_device_uuid is amdsmi's own, generated from the ASIC serial and
    device id (amdsmi_uuid_gen, src/amd_smi/amd_smi.cc at rocm-6.1.0), not the string HIP reports.
    """
    tried: list[str] = []
    if device.pci_bus_id:
        try:
            handle = smi.amdsmi_get_processor_handle_from_bdf(device.pci_bus_id)
            return handle, _amd_facts(smi, handle, _record("pci_bus_id", device, tried))
        except Exception as exc:  # AmdSmiLibraryException(API_FAILED) when nothing matches, BdfFormatException
            tried.append(f"amdsmi_get_processor_handle_from_bdf({device.pci_bus_id}): {type(exc).__name__}: {exc}")
        return _amd_scan(smi, device, tried)
    handle = smi.amdsmi_get_processor_handles()[device.index]
    warning = _ordinal_warning("amdsmi", device.index) + "; amdsmi's order need not be HIP's either"
    return handle, _amd_facts(smi, handle, _record("ordinal", device, tried, warning))


def _amd_scan(smi: Any, device: DeviceInfo, tried: list[str]) -> tuple[Any, dict[str, Any]]:
    wanted = parse_pci(device.pci_bus_id)
    found = [h for h in smi.amdsmi_get_processor_handles()
             if (p := parse_pci(_ask(smi.amdsmi_get_gpu_device_bdf, h))) and wanted and p[:3] == wanted[:3]]
    if len(found) != 1:
        tried.append(f"amdsmi_get_gpu_device_bdf over every handle: {len(found)} match domain:bus:device")
        raise LookupError("the timed GPU was not found by amdsmi: " + "; ".join(tried))
    return found[0], _amd_facts(smi, found[0], _record("pci_bus_id (scan)", device, tried))


def _amd_facts(smi: Any, handle: Any, record: dict[str, Any]) -> dict[str, Any]:
    asic = _ask(smi.amdsmi_get_gpu_asic_info, handle) or {}
    record.update(uuid=_text(_ask(smi.amdsmi_get_gpu_device_uuid, handle)), serial=_text(asic.get("asic_serial")),
                  pci_bus_id=_text(_ask(smi.amdsmi_get_gpu_device_bdf, handle)))
    return record
