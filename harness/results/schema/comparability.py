"""Comparability keys: two results may be compared only if these match.

A key hashes what gives a number its meaning: the workload and its parameters, the dtype, the FLOP
convention and the measurement protocol. Sizes of the stop rule (how precise) are not part of it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def comparability_fields(workload: str, params: Mapping[str, Any], dtype: str, flop_convention: str,
                         protocol: Mapping[str, Any]) -> dict[str, Any]:
    return {"workload": workload, "params": dict(params), "dtype": dtype, "flop_convention": flop_convention,
            "protocol": dict(protocol)}


# json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str) builds this encoder at every call; one
# encoder of the same settings writes the same text (validation hashes every row's fields: 4,000 a bundle)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)


def comparability_key(fields: Mapping[str, Any]) -> str:
    canonical = _CANONICAL.encode(fields)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
