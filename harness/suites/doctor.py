"""`xmfu doctor`: what xmfu sees on this machine, and what will not work, before anyone spends an hour on a sweep.

Reports the frameworks and their device builds, the devices with their identities, the peaks that apply,
each telemetry source with the fields it really returns, whether clocks are locked, the NCCL/RCCL version,
and, for every workload, which backends would be skipped here and why (their own `available()` answers on
a smoke-sized case). Exit status 1 names every problem found; 0 when nothing stands in the way.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from xmfu.harness.machine import compat, environment, stack
from xmfu.harness.machine.platform import Platform, detect, host_shows_gpu
from xmfu.harness.machine.sync import sync_rule
from xmfu.harness.machine.telemetry import open_sampler
from xmfu.harness.machine.vendor_stack import vendor_stacks

FRAMEWORKS = ("torch", "jax", "jaxlib", "triton", "optax", "nvidia-ml-py", "amdsmi", "pyarrow",
              "hydra-submitit-launcher")
# What each optional package is for, said when it is missing.
PURPOSE = {"torch": "every torch backend", "jax": "every JAX backend", "jaxlib": "every JAX backend",
           "triton": "the Triton kernels", "optax": "the JAX training step", "nvidia-ml-py": "NVIDIA telemetry (NVML)",
           "amdsmi": "AMD telemetry", "pyarrow": "xmfu history", "hydra-submitit-launcher": "Slurm launches"}
NEEDED_ON = {"nvidia-ml-py": ("cuda",), "amdsmi": ("rocm",)}  # telemetry packages only matter on their vendor


# Extras `make install` does not bring (pyproject.toml): a backend skipped only for want of one is noted, not a
# problem, as a package nobody asked for is not missing.
NOT_INSTALLED_BY_DEFAULT = ("helion",)
# Where a doctor names `pip install 'xmfu[...]'`, the way without a package index (docs/install.md, Offline nodes).
OFFLINE = ("no package index on this node? the same extras come from a wheelhouse: `make wheelhouse "
           "WHEELHOUSE_EXTRAS=<extra>` on a machine with one, then `make install OFFLINE=dist/wheelhouse` here "
           "(docs/install.md, Offline nodes)")


@dataclass
class Findings:
    facts: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # in nobody's way here (a CPU machine's GPU-only backends)


def accelerator_expected(plat: Platform, device: str = "auto") -> bool:
    """An accelerator is expected where `device=gpu` was asked for or a GPU driver's device node exists; on a
    machine with neither, a CPU platform is what it is, not a problem."""
    return plat.has_accelerator or device == "gpu" or host_shows_gpu()


def _version(name: str) -> str | None:
    # ROCm's torch ships its Triton as the distribution pytorch-triton-rocm (import name triton)
    for dist in ("triton", "pytorch-triton-rocm") if name == "triton" else (name,):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def check_packages(plat: Platform, found: Findings) -> None:
    versions = {name: _version(name) for name in FRAMEWORKS}
    found.facts["packages"] = versions
    for name, version in versions.items():
        wanted_here = plat.kind in NEEDED_ON.get(name, (plat.kind,))
        if version is None and wanted_here:
            found.problems.append(f"{name} is not installed: {PURPOSE[name]} will not run")
    found.facts["compat"] = compat.record()
    found.problems += [f"{finding} (supported range: {compat.DOCS})" for finding in found.facts["compat"]["outside"]]


def check_devices(plat: Platform, found: Findings) -> None:
    found.facts["platform"] = {"kind": plat.kind, "reason": plat.reason}
    found.facts["devices"] = [d.as_dict() for d in plat.devices]
    found.facts["peaks"] = environment.peaks_used(plat)["by_dtype"]
    if not plat.has_accelerator and accelerator_expected(plat, found.facts.get("device", "auto")):
        found.problems.append(f"no accelerator visible ({plat.reason}): runs measure this CPU, and GPU-only "
                              "backends (cuDNN attention, fp8, NCCL) report skipped")
    elif not plat.has_accelerator:
        found.notes.append("a CPU machine (no GPU device node): runs measure this CPU; GPU-only backends report "
                           "skipped")
    elif all(p["peak_tflops"] is None for p in found.facts["peaks"].values()):
        found.problems.append(f"no datasheet peak for {plat.device.name!r}: MFU will be null; pass peak_tflops=")


def check_telemetry(plat: Platform, found: Findings) -> None:
    sampler = open_sampler(plat)
    probe = getattr(sampler, "probe", None)
    try:
        report = probe() if probe else {"static": sampler.static()}
    except Exception as exc:  # a probe that fails is itself the finding
        report = {"error": f"{type(exc).__name__}: {exc}"}
    found.facts["telemetry"] = {"sampler": sampler.name, "available": sampler.available,
                                "reason": sampler.reason or None, "fields": report}
    if not sampler.available:
        found.problems.append(f"telemetry: {sampler.reason}")
    probe_clocks = report.get("clocks") if isinstance(report, dict) else None  # {"value", "source", "reason"}
    found.facts["clocks"] = (probe_clocks or {}).get("value") or {"locked": None,
                                                                   "reason": (probe_clocks or {}).get("reason")}
    found.facts["nccl"] = environment.nccl_version() if plat.has_accelerator else None
    found.facts["torch_settings"] = stack.torch_settings(plat.kind)


def _availability(registry: Any, name: str, plat: Platform) -> tuple[int, dict[str, list[str]]]:
    """(number of smoke cases, backend -> the reason it gave for each case it cannot run)."""
    from xmfu.harness.config.hydra_app import compose_job
    from xmfu.harness.config.run_settings import parse_run_config
    from xmfu.harness.engine.context import RunContext

    data, _ = compose_job([f"workload={name}", "experiment=smoke"])
    cfg = parse_run_config(data, registry.backends_by_workload())
    ctx = RunContext(cfg, plat)
    cases = registry.workload(name).expand(cfg.workload, cfg.dtype, cfg.seed)
    reasons: dict[str, list[str]] = {b: [] for b in registry.backends_by_workload()[name]}
    for case in cases:
        for backend in reasons:
            try:
                ok, why = registry.workload(name).implementations[backend].available(case, ctx)
            except Exception as exc:  # a crash here is exactly what a user should learn before a sweep
                ok, why = False, f"{type(exc).__name__}: {exc}"
            if not ok:
                reasons[backend].append(why)
    return len(cases), reasons


def check_backends(plat: Platform, found: Findings, registry: Any = None) -> None:
    """Each workload's backends asked, on its smoke cases, whether they can run here. A backend that runs
    none of them is a problem; one that runs some is noted in the facts with the reasons for the rest."""
    if registry is None:
        from xmfu.workloads.catalog import build_registry

        registry = build_registry()
    from xmfu.harness.engine.plugins import register_installed

    plugins = register_installed(registry)  # installed plug-ins join their workload's backends below
    found.facts["plugins"] = plugins
    found.problems += [f"plug-in {p['name']} ({p['package']} {p['version']}): {p['problem']}" for p in plugins
                       if p["problem"]]
    skipped: dict[str, dict[str, list[str]]] = {}
    for name in registry.backends_by_workload():
        count, reasons = _availability(registry, name, plat)
        for backend, why in reasons.items():
            if not why:
                continue
            skipped.setdefault(name, {})[backend] = sorted(set(why))
            if len(why) == count:
                said = f"{name}/{backend} will be skipped: {'; '.join(sorted(set(why)))}"
                (found.notes if _not_in_the_way(plat, found, why) else found.problems).append(said)
    found.facts["backends_skipped"] = skipped


def _not_in_the_way(plat: Platform, found: Findings, why: list[str]) -> bool:
    """A backend skipped here for what this machine is (a GPU-only backend on a CPU machine: its reason says
    "this is a cpu device") or for an extra `make install` does not bring: a note, not a problem."""
    gpu_only = not accelerator_expected(plat, found.facts.get("device", "auto")) and all(
        f"this is a {plat.kind} device" in w for w in why)
    optional = all(any(f"pip install 'xmfu[{extra}]'" in w for extra in NOT_INSTALLED_BY_DEFAULT) for w in why)
    return gpu_only or optional


NOT_MEASURED = "Trainium, Gaudi and Intel GPUs have not been measured by xmfu: their peaks and telemetry are untried"


def check_vendor_stack(plat: Platform, found: Findings) -> None:
    """The device type torch reports, the vendor stacks whose versions can be read (Neuron SDK, SynapseAI, oneAPI)
    and the telemetry source (check_telemetry's sampler)."""
    stacks = vendor_stacks()
    found.facts["device_type"] = plat.kind
    found.facts["vendor_stacks"] = stacks
    found.facts["sync_rules"] = {fw: sync_rule(fw, plat.kind).as_dict() for fw in ("torch", "jax")}
    if plat.kind in ("neuron", "hpu", "xpu") or any(s["present"] for s in stacks.values()):
        found.facts["not_measured"] = NOT_MEASURED


def diagnose(device: str = "auto") -> Findings:
    found = Findings(facts={"device": device})
    plat = detect(device)
    for check in (check_packages, check_devices, check_vendor_stack, check_telemetry, check_backends):
        check(plat, found)
    return found


def render(found: Findings) -> str:
    f = found.facts
    lines = [f"platform: {f['platform']['kind']} ({f['platform']['reason']})"]
    for d in f["devices"]:
        ident = d.get("uuid") or d.get("pci_bus_id") or "no UUID/PCI id read"
        lines.append(f"device {d['index']}: {d['name']} [{d.get('compute_capability') or d.get('arch') or ''}] "
                     f"{d['multiprocessors']} SMs/CUs/cores, {ident}")
    lines.append("packages: " + ", ".join(f"{k} {v or 'MISSING'}" for k, v in f["packages"].items()))
    lines.append("peaks (dense TFLOP/s): " + ", ".join(
        f"{dt} {p['peak_tflops']:.4g}" if p["peak_tflops"] else f"{dt} null" for dt, p in f["peaks"].items()))
    lines.append(f"device type: {f.get('device_type', 'not read')}")
    lines.append("vendor stacks: " + ("; ".join(
        f"{name} " + (", ".join(f"{k} {v}" for k, v in s["packages"].items() if v) + (
            f", driver {s['driver']}" if s["driver"] else "") if s["present"] else "not found")
        for name, s in (f.get("vendor_stacks") or {}).items()) or "not read"))
    for framework, rule in (f.get("sync_rules") or {}).items():  # how a row's timer knows the device finished
        lines.append(f"sync rule, {framework}: {rule['method'] or 'none proven: rows checked, not timed'}")
    if f.get("not_measured"):
        lines.append(f"note: {f['not_measured']}")
    tel = f["telemetry"]
    lines.append(f"telemetry: {tel['sampler']} ({'available' if tel['available'] else tel['reason']})")
    for key, value in (tel["fields"] or {}).items():
        lines.append(f"  {key}: {json.dumps(value, default=str)[:160]}")
    clocks = f["clocks"]
    lines.append(f"clocks locked: {clocks.get('locked')} ({clocks.get('reason') or clocks.get('detail')})")
    lines.append(f"NCCL/RCCL: {f['nccl'] or 'not applicable here'}")
    plugins = f.get("plugins") or []
    lines.append("plug-in backends: " + (", ".join(
        f"{p['name']} ({p['package'] or 'no distribution'} {p['version'] or ''}: {p['object']}, "
        f"{p['workload'] or 'workload unknown'}{', NOT USABLE' if p['problem'] else ''})" for p in plugins)
        or "none installed (entry points of xmfu.backends)"))
    lines += [f"note: {n}" for n in found.notes]
    lines += [f"PROBLEM: {p}" for p in found.problems] or ["no problems found"]
    if any("pip install 'xmfu[" in said for said in [*found.problems, *found.notes]):
        lines.append(f"note: {OFFLINE}")
    return "\n".join(lines)


def main(args: list[str]) -> int:
    as_json = "--json" in args
    found = diagnose("cpu" if "--cpu" in args else "auto")
    if as_json:
        print(json.dumps({"facts": found.facts, "problems": found.problems, "notes": found.notes}, indent=2,
                         default=str))
    else:
        print(render(found))
    sys.stdout.flush()
    return 1 if found.problems else 0
