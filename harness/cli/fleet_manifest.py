"""`xmfu fleet manifest`: the fleet's checks as a Kubernetes JobSet written to a file (harness/fleet/jobset.py),
checked offline against a minimal copy of the JobSet CRD's schema before it is written. Nothing is submitted:
`kubectl apply -f FILE` does that. Exit 0 written, 2 bad input (one paragraph, nothing written)."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Sequence
from pathlib import Path

from xmfu.harness.cli.common import Parser, usage_error


def _parser() -> Parser:
    from xmfu.harness.fleet import jobset
    from xmfu.harness.fleet.spec import LEVELS

    p = Parser(prog="xmfu fleet manifest",
               description="write the fleet's checks as a Kubernetes JobSet (one replicated job per role)")
    p.add_argument("--nodes", type=int, required=True, help="nodes to check (2 or more)")
    p.add_argument("--image", default=jobset.DEFAULT_IMAGE,
                   help=f"an image whose entrypoint is xmfu (default {jobset.DEFAULT_IMAGE}: make image-cuda)")
    p.add_argument("--level", choices=LEVELS, default="quick",
                   help="quick: seconds per node; medium: about 2 minutes; long: the acceptance suite")
    p.add_argument("--scale", choices=("auto", "smoke", "full"), default="auto",
                   help="the node checks' sizes (auto: smoke sizes on a node without an accelerator)")
    p.add_argument("--gpus-per-node", type=int, default=0,
                   help="devices each pod asks for (a node's all: each pod measures its node); 0: none asked")
    p.add_argument("--gpu-resource", default="nvidia.com/gpu", help="the device plugin's resource (amd.com/gpu)")
    p.add_argument("--results-claim", default=jobset.DEFAULT_CLAIM,
                   help="a ReadWriteMany PersistentVolumeClaim mounted at /results in every pod")
    p.add_argument("--name", help="the JobSet's name (default xmfu-fleet-<6 hex digits>)")
    p.add_argument("--namespace", help="the JobSet's namespace (default: kubectl's)")
    p.add_argument("-o", "--output", required=True, help="the file to write (YAML)")
    return p


def cmd_manifest(args: Sequence[str]) -> int:
    from xmfu.harness.fleet import jobset

    ns = _parser().parse_args(args)
    m = jobset.ManifestSpec(ns.name or f"xmfu-fleet-{secrets.token_hex(3)}", ns.nodes, ns.image, ns.level, ns.scale,
                            ns.gpus_per_node, ns.gpu_resource, ns.results_claim, ns.namespace)
    out = Path(ns.output)
    if not out.parent.is_dir():
        return usage_error(f"fleet manifest: -o {out}: the folder {out.parent} does not exist")
    try:
        jobset.write(m, out)
    except ValueError as exc:
        return usage_error(f"fleet manifest: {exc}. Nothing was written.")
    except OSError as exc:
        return usage_error(f"fleet manifest: -o {out}: {exc.strerror or exc}. Nothing was written.")
    print(f"xmfu fleet manifest: {out}: JobSet {m.name}, {m.nodes} nodes (roles nodes, links: {m.pairs} pairs, all), "
          f"level {m.level}, image {m.image}; validated against {jobset.SCHEMA_FILE.name} "
          f"(JobSet CRD {jobset.API_VERSION}). Submit it with: kubectl apply -f {out}", file=sys.stdout)
    return 0
