"""The GPU reference set's estimated minutes per part, as a table `--list` prints without importing a framework.

Deriving an estimate (reference_parts.estimate) composes every part's config with Hydra: 7 s of CPU here, 37 s on a
loaded machine (issue 42 item 5). tests/test_gpu_reference.py checks this table is what the parts derive now, and
`derived_estimates()` prints it afresh to paste here.
"""

from __future__ import annotations

import json

from reference_parts import PARTS, Estimate, estimate

# Each part's estimate as reference_parts.estimate derives it: (rows, (start, timing, device, prepare, host) seconds).
# Deriving composes every part's config with Hydra (7 s of CPU here, 37 s on a loaded machine: issue 42 item 5), so
# `--list` prints these and imports no framework (no Hydra, OmegaConf, numpy, torch, JAX or Triton);
# tests/test_gpu_reference.py checks they are what the parts derive now (`derived_estimates()` prints them afresh).
ESTIMATES: dict[str, tuple[int, tuple[float, float, float, float, float]]] = {
    "mamf-bf16": (28, (30.0, 56.30359391232643, 0.12143756493057772, 14.0, 104.57708494847999)),
    "mamf-fp8": (30, (30.0, 56.158636275191135, 0.06345451007645417, 26.0, 104.74888364031999)),
    "matmul": (14, (30.0, 20.054491215032954, 0.021796486013180617, 241.0, 4.1070624767999995)),
    "attention-fwd-d64-full": (60, (30.0, 18.547184913342768, 0.21887396533710818, 93.0, 34.426847232)),
    "attention-fwd-d64-causal": (60, (30.0, 18.275015699299303, 0.1100062797197212, 93.0, 25.2673130496)),
    "attention-fwd-d128-full": (60, (30.0, 18.547184913342768, 0.21887396533710818, 93.0, 52.747567104)),
    "attention-fwd-d128-causal": (60, (30.0, 18.275015699299303, 0.1100062797197212, 93.0, 34.428498739199995)),
    "attention-fwd-bwd-d64-full": (60, (30.0, 19.915147196699696, 0.7660588786798787, 93.0, 80.228646912)),
    "attention-fwd-bwd-d64-causal": (60, (30.0, 18.959693162302358, 0.3838772649209432, 93.0, 48.17027727359999)),
    "attention-fwd-bwd-d128-full": (60, (30.0, 19.915147196699696, 0.7660588786798787, 93.0, 144.351166464)),
    "attention-fwd-bwd-d128-causal": (60, (30.0, 18.959693162302358, 0.3838772649209432, 93.0, 80.2344271872)),
    "attention-compiled": (24, (30.0, 24.70354636116643, 0.28141854446657233, 244.0, 80.61795172352001)),
    "training-1b": (4, (30.0, 13.404439795523558, 1.3617759182094236, 185.0, 46.273145405440005)),
    "inference-1b": (12, (30.0, 32.14994560137879, 0.8599782405515157, 132.0, 59.819428904960006)),
    "inference-1b-compiled": (8, (30.0, 20.46566684759781, 0.18626673903912278, 240.0, 55.024284303360005)),
    "inference-8b": (4, (30.0, 15.677106829828286, 1.2063285356097289, 44.0, 269.17435703296)),
    "collectives-torch": (192, (45.0, 4.6413332780213015, 0.007817885639232426, 38.400000000000006, 0.0)),
    "collectives-jax": (192, (30.0, 4.6413332780213015, 0.007817885639232426, 96.0, 0.0)),
}
TERMS = ("start", "timing", "device", "prepare", "host")


def listed_estimate(name: str) -> Estimate:
    """The part's estimate: from ESTIMATES, derived where a part is not there yet."""
    if name not in ESTIMATES:
        return estimate(name)
    cases, terms = ESTIMATES[name]
    return Estimate(cases, dict(zip(TERMS, terms, strict=True)))


def derived_estimates() -> str:
    """ESTIMATES' source text as the parts derive it now (composing each part's config)."""
    rows = []
    for part in PARTS:
        e = estimate(part.name)
        rows.append(f"    {json.dumps(part.name)}: ({e.cases}, ({', '.join(repr(e.terms[k]) for k in TERMS)})),")
    return "ESTIMATES = {\n" + "\n".join(rows) + "\n}"
