"""`xmfu references [--json] [--device ID]`: the public reference table (harness/machine/references.yaml), each
entry with its conditions, FLOP convention, conversions and source."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from xmfu.harness.cli.common import Parser, usage_error


def _lines(e: dict[str, Any]) -> list[str]:
    cond = ", ".join(f"{k} {v}" for k, v in e["conditions"].items())
    out = [f"{e['id']}: {e['device']} {e['figure']} {e['value']:g} {e['unit']} ({cond})",
           f"  conditions not matched on: {e.get('context') or 'none stated'}"]
    if e.get("energy"):  # an energy figure: what its energy covers, in place of a FLOP convention
        out += [f"  energy {k}: {' '.join(str(v).split())}" for k, v in e["energy"].items()]
    else:
        out.append(f"  FLOP convention: {' '.join(str(e['flop_convention']).split())}")
    printed = e.get("printed")
    if printed:
        out.append(f"  the source printed: {printed['value']:g} {printed['unit']} ({printed['convention']})")
    out += [f"  under {c['formula']}: {c['arithmetic']} = {c['result']:g}" for c in e.get("conversions") or []]
    s = e["source"]
    out.append(f"  source: {s['url']}, read {s['read']}: {' '.join(s['what'].split())}")
    return out


def cmd_references(args: Sequence[str]) -> int:
    from xmfu.harness.machine import peaks, references

    parser = Parser(prog="xmfu references")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--device", help="only this peak-table id's references (xmfu peaks lists the ids)")
    ns = parser.parse_args(args)
    ids = [e["id"] for e in peaks.load_table()["devices"]]
    if ns.device is not None and ns.device not in ids:
        return usage_error(f"references: --device {ns.device!r} is not a peak-table id. Allowed: {', '.join(ids)}")
    chosen = [e for e in references.entries() if ns.device in (None, e["device"])]
    bands = references.default_bands()
    if ns.json:
        print(json.dumps({"bands": {"within": bands.within, "far_below": bands.far_below},
                          "references": chosen}, indent=2))
        return 0
    print(f"public references (harness/machine/references.yaml): a figure at or above {bands.within:.0%} of its "
          f"reference is within its band, below {bands.far_below:.0%} far below; matched only on the same device "
          "id and conditions")
    for e in chosen:
        print("\n".join(_lines(e)))
    if not chosen:
        print(f"no public reference for {ns.device}")
    return 0
