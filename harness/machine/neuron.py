"""What one torch device is on AWS Neuron: a logical NeuronCore of 1 or 2 physical cores (the LNC degree).

The Neuron Runtime groups NEURON_LOGICAL_NC_CONFIG physical NeuronCores, which share HBM, into one logical core,
and that is what a framework sees as a device (aws-neuron-sdk, about-neuron/arch/neuron-features/
logical-neuroncore-config.rst; nki/get-started/about/lnc.rst: "an LNC degree ... of either 1 or 2"). Unset, the
compiler uses LNC=2 on Trn2 and later (compiler error page NCC_EVRF066: "neuronx-cc defaults to LNC=2 on Trn2 and
later"); Trn1 takes only LNC=1 (NCC_EARG001: "On trn1, only lnc=1 is supported"). The peak of such a device is
the per-core figure x this degree (machine/peaks.py `neuroncore_peak`).
"""

from __future__ import annotations

from collections.abc import Mapping

LNC_VARIABLE = "NEURON_LOGICAL_NC_CONFIG"
DEFAULT_LNC = {"trn1": 1, "trn2": 2, "trn3": 2}  # NCC_EARG001, NCC_EVRF066


def family(instance_type: str | None) -> str | None:
    """'trn2' for 'trn2.48xlarge' or 'trn2u.48xlarge', 'trn1' for 'trn1n.32xlarge'; None for anything else."""
    head = (instance_type or "").split(".")[0].lower()
    return next((f for f in DEFAULT_LNC if head.startswith(f)), None)


def lnc_degree(environ: Mapping[str, str], instance_type: str | None) -> tuple[int | None, str]:
    """The physical NeuronCores per torch device, and where that came from; None with the reason when unknown."""
    fam = family(instance_type)
    raw = environ.get(LNC_VARIABLE)
    if raw is not None:
        if raw.strip() not in ("1", "2"):
            return None, f"{LNC_VARIABLE}={raw!r} is not 1 or 2"
        degree = int(raw)
        if fam == "trn1" and degree != 1:
            return None, f"{LNC_VARIABLE}={degree} on trn1, which takes only LNC=1"
        return degree, f"{LNC_VARIABLE}={degree}"
    if fam is None:
        return None, f"{LNC_VARIABLE} is unset and the instance type ({instance_type!r}) is not a Trainium one"
    return DEFAULT_LNC[fam], f"{LNC_VARIABLE} unset: the {fam} default, LNC={DEFAULT_LNC[fam]}"
