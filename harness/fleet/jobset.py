"""`xmfu fleet manifest`: the fleet's checks as a Kubernetes JobSet (jobset.x-k8s.io/v1alpha2, kubernetes-sigs/jobset),
for clusters scheduled by Kubernetes rather than Slurm. One replicated job per role, in the order the Slurm job runs
them (harness/fleet/job.py), each started when the one before it has completed (`dependsOn`):

- `nodes`: the per-node check, an Indexed Job of N completions run at once, one pod per node (a required pod
  anti-affinity on the node's hostname), each writing its bundle under nodes/<node name>;
- `links`: N/2 Jobs of two pods, an all_reduce between them; the role's pods are spread one per node, so the
  pairs are disjoint and run at once. Kubernetes, not xmfu, picks which nodes pair: one round of disjoint pairs
  (Slurm's `--pairs quick|exhaustive` rounds name the nodes, which a manifest written before scheduling cannot);
- `all`: every node together, one pod per node: the collective (an init container), then the training step.

Ranks come from the Indexed Job's completion index (the pod annotation batch.kubernetes.io/job-completion-index),
the master from JobSet's pod DNS names (`<jobset>-<role>-<job index>-<pod index>.<subdomain>`, the subdomain the
JobSet's name: spec.network.enableDNSHostnames), as torchrun's RANK/WORLD_SIZE/MASTER_ADDR variables, which
harness/machine/ranks.py reads. Every pod mounts one ReadWriteMany claim at /results (the bundles, as the Slurm job's
shared folder) and runs the image's entrypoint (`xmfu` in the project's images: Dockerfile.cuda, Dockerfile.rocm)
with the step's arguments.

Before it is written, the manifest is checked offline against a minimal copy of the JobSet CRD's openAPIV3Schema
(jobset_schema.json, its source and what was changed recorded in it) by the small checker below, and against the
two rules of JobSet's admission webhook that a manifest can break on its own (pkg/webhooks/jobset_webhook.go at
v0.12.0: generated pod names within 63 characters, dependsOn naming an earlier replicated job).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from xmfu.harness.fleet import job
from xmfu.harness.fleet.spec import LEVELS, FleetSpec

API_VERSION = "jobset.x-k8s.io/v1alpha2"
KIND = "JobSet"
SCHEMA_FILE = Path(__file__).with_name("jobset_schema.json")
RESULTS_MOUNT = "/results"
DEFAULT_IMAGE = "xmfu:cuda"  # what `make image-cuda` tags; push it where the cluster pulls from and name it there
DEFAULT_CLAIM = "xmfu-results"
MASTER_PORT = "29500"
# Minutes added to each Job's deadline (activeDeadlineSeconds counts from the Job's start, pending pods included):
# pulling a GPU image (the NGC and ROCm bases are 10-20 GB) onto a node the first time.
PULL_MINUTES = 15
HOSTNAME_KEY = "kubernetes.io/hostname"
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
JOB_INDEX = "metadata.annotations['jobset.sigs.k8s.io/job-index']"
ROLE_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
# JobSet's webhook: the JobSet name, and its generated Job and pod names, are DNS-1035 labels of 63 characters at
# most; the pod name checked with a 5-character suffix (GenPodName(...) + "-abcde").
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
EXTENDED_RESOURCE = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


@dataclass(frozen=True)
class ManifestSpec:
    """What `xmfu fleet manifest` is asked for."""

    name: str
    nodes: int
    image: str = DEFAULT_IMAGE
    level: str = "quick"
    scale: str = "auto"
    gpus_per_node: int = 0  # each pod asks for this many of gpu_resource (all of a node's: it measures the node)
    gpu_resource: str = "nvidia.com/gpu"  # amd.com/gpu for AMD's device plugin
    results_claim: str = DEFAULT_CLAIM  # a ReadWriteMany PersistentVolumeClaim every node can mount
    namespace: str | None = None

    @property
    def folder(self) -> str:
        return f"{RESULTS_MOUNT}/{self.name}"

    @property
    def pairs(self) -> int:
        return self.nodes // 2


def check(m: ManifestSpec) -> list[str]:
    """Every value that is not allowed, each with what is."""
    out = []
    if m.nodes < 2:
        out.append(f"--nodes {m.nodes}: at least 2 (a fleet is judged node against node)")
    if not DNS_1035.match(m.name):
        out.append(f"--name {m.name!r}: a DNS-1035 label (lower-case letters, digits and '-', starting with a letter)")
    else:
        longest = max(len(_pod_name(m.name, role, jobs - 1, pods - 1)) for role, jobs, pods in _shape(m))
        if longest > 63:
            out.append(f"--name {m.name!r}: too long for {m.nodes} nodes (JobSet names its pods "
                       f"<name>-<role>-<job>-<pod>-xxxxx, {longest} characters here, 63 at most)")
    if m.level not in LEVELS:
        out.append(f"--level {m.level}: allowed {', '.join(LEVELS)}")
    if m.scale not in ("auto", "smoke", "full"):
        out.append(f"--scale {m.scale}: allowed auto, smoke, full")
    if not m.image or any(c.isspace() for c in m.image):
        out.append(f"--image {m.image!r}: an image reference without spaces")
    if m.gpus_per_node < 0:
        out.append(f"--gpus-per-node {m.gpus_per_node}: 0 (ask for none) or more")
    if not EXTENDED_RESOURCE.match(m.gpu_resource):
        out.append(f"--gpu-resource {m.gpu_resource!r}: a device plugin's resource name, such as nvidia.com/gpu or "
                   "amd.com/gpu")
    if not DNS_1123_SUBDOMAIN.match(m.results_claim) or len(m.results_claim) > 253:
        out.append(f"--results-claim {m.results_claim!r}: a PersistentVolumeClaim's name (lower-case DNS name)")
    if m.namespace is not None and (not DNS_1123_LABEL.match(m.namespace) or len(m.namespace) > 63):
        out.append(f"--namespace {m.namespace!r}: a namespace's name (lower-case DNS label, 63 characters at most)")
    return out


def _shape(m: ManifestSpec) -> list[tuple[str, int, int]]:
    """(role, Jobs, pods per Job) of each replicated job."""
    return [("nodes", 1, m.nodes), ("links", m.pairs, 2), ("all", 1, m.nodes)]


def _pod_name(name: str, role: str, job_index: int, pod_index: int) -> str:
    return f"{name}-{role}-{job_index}-{pod_index}-abcde"  # the webhook's longest pod name


# The manifest


def _fleet(m: ManifestSpec) -> FleetSpec:
    """The Slurm job's spec for the same checks: its steps' arguments and time limits are the manifest's."""
    return FleetSpec(m.name, m.nodes, m.level, "quick", RESULTS_MOUNT, scale=m.scale)


def _args(words: tuple[str, ...], m: ManifestSpec) -> list[str]:
    return [w.replace("$F", m.folder) for w in words]


def _env(name: str, value: str | None = None, field: str | None = None) -> dict[str, Any]:
    return {"name": name, "value": value} if field is None else {"name": name,
                                                                  "valueFrom": {"fieldRef": {"fieldPath": field}}}


def _ranks(world: int, master: str) -> list[dict[str, Any]]:
    """torchrun's variables for a pod of an Indexed Job: its completion index is its rank."""
    return [_env("RANK", field=COMPLETION_INDEX), _env("WORLD_SIZE", str(world)), _env("LOCAL_RANK", "0"),
            _env("MASTER_ADDR", master), _env("MASTER_PORT", MASTER_PORT)]


def _container(m: ManifestSpec, name: str, args: list[str], env: list[dict[str, Any]]) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": m.image, "args": args,
                         "env": [_env("HOME", "/tmp"), *env],  # the image's user may have no home; caches go there
                         "volumeMounts": [{"name": "results", "mountPath": RESULTS_MOUNT},
                                          {"name": "dshm", "mountPath": "/dev/shm"}]}
    if m.gpus_per_node:
        c["resources"] = {"limits": {m.gpu_resource: m.gpus_per_node}}
    return c


def _replicated_job(m: ManifestSpec, role: str, replicas: int, pods: int, minutes: int,
                    containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None,
                    after: str | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        # one pod of the role per node: each node checked once, each pair on two nodes, pairs disjoint
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {JOBSET_LABEL: m.name, ROLE_LABEL: role}},
             "topologyKey": HOSTNAME_KEY}]}},
        **({"initContainers": init} if init else {}),
        "containers": containers,
        "volumes": [{"name": "results", "persistentVolumeClaim": {"claimName": m.results_claim}},
                    # torch's processes share tensors through /dev/shm, which is 64 MiB in a pod otherwise
                    {"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }
    out: dict[str, Any] = {
        "name": role, "replicas": replicas,
        "template": {"spec": {
            "completionMode": "Indexed", "completions": pods, "parallelism": pods,
            "backoffLimit": 0,  # a check that failed is a finding, not something to retry
            "activeDeadlineSeconds": (minutes + PULL_MINUTES) * 60,
            "template": {"metadata": {"labels": {"app.kubernetes.io/name": "xmfu-fleet"}}, "spec": pod}}}}
    if after:
        out["dependsOn"] = [{"name": after, "status": "Complete"}]
    return out


def manifest(m: ManifestSpec) -> dict[str, Any]:
    """The JobSet, as a mapping (yaml.safe_dump writes it)."""
    fleet = _fleet(m)
    node = job.node_steps(fleet, ["$(NODE_NAME)"])[0]  # run_id=$(NODE_NAME): Kubernetes expands it from env
    collective, training = job.all_steps(fleet)
    nodes = _replicated_job(m, "nodes", 1, m.nodes, fleet.minutes("node"), [
        _container(m, "check", _args(node.command, m), [_env("NODE_NAME", field="spec.nodeName")])])
    pair_master = f"{m.name}-links-$(JOB_INDEX)-0.{m.name}"
    links = _replicated_job(m, "links", m.pairs, 2, fleet.minutes("pair"), [
        _container(m, "link", _args(job.link_command("pair-$(JOB_INDEX)", f"{m.folder}/links"), m),
                   [_env("JOB_INDEX", field=JOB_INDEX), *_ranks(2, pair_master)])], after="nodes")
    all_env = _ranks(m.nodes, f"{m.name}-all-0-0.{m.name}")
    every = _replicated_job(m, "all", 1, m.nodes, 2 * fleet.minutes("all"),
                            [_container(m, "training", _args(training.command, m), all_env)],
                            init=[_container(m, "collectives", _args(collective.command, m), all_env)], after="links")
    metadata: dict[str, Any] = {"name": m.name, "labels": {"app.kubernetes.io/name": "xmfu-fleet"}}
    if m.namespace:
        metadata["namespace"] = m.namespace
    doc = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata,
           "spec": {"network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                    "failurePolicy": {"maxRestarts": 0},
                    "replicatedJobs": [nodes, links, every]}}
    return json.loads(json.dumps(doc))  # no object shared between containers (YAML would write it as an alias)


# The offline check: a minimal checker for the JSON Schema subset jobset_schema.json uses


KNOWN = {"type", "properties", "required", "additionalProperties", "items", "enum", "maxItems", "format", "pattern",
         "anyOf", "$ref", "$defs", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
         "x-kubernetes-int-or-string"}
TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int}
FORMATS = {"int32": 2**31, "int64": 2**63}


@cache
def schema() -> dict[str, Any]:
    """The schema part of jobset_schema.json; ValueError if it uses a keyword the checker does not apply (so a
    widened copy is never checked only in part)."""
    doc = json.loads(SCHEMA_FILE.read_text())["schema"]
    unknown = sorted({k for node in _nodes(doc) for k in node} - KNOWN)
    if unknown:
        raise ValueError(f"{SCHEMA_FILE.name} uses {', '.join(unknown)}, which harness/fleet/jobset.py does not check")
    return doc


def _nodes(node: Any) -> Iterator[dict[str, Any]]:
    """Every schema node below (and including) this one."""
    if not isinstance(node, dict):
        return
    yield node
    for key in ("properties", "$defs"):
        for sub in node.get(key, {}).values():
            yield from _nodes(sub)
    for key in ("items", "additionalProperties"):
        yield from _nodes(node.get(key))
    for sub in node.get("anyOf", []):
        yield from _nodes(sub)


def problems(value: Any, node: dict[str, Any] | None = None, path: str = "", root: dict | None = None) -> list[str]:
    """Where the value breaks the schema (by default jobset_schema.json's), each as `path: what`."""
    root = root if root is not None else schema()
    node = root if node is None else node
    if "$ref" in node:
        node = root["$defs"][node["$ref"].removeprefix("#/$defs/")]
    at = path or "(the document)"
    if "anyOf" in node and not any(not problems(value, sub, path, root) for sub in node["anyOf"]):
        return [f"{at}: {value!r} is none of {', '.join(sub.get('type', '?') for sub in node['anyOf'])}"]
    kind = node.get("type")
    if kind and not (isinstance(value, TYPES[kind]) and not (kind == "integer" and isinstance(value, bool))):
        return [f"{at}: {type(value).__name__} {value!r}, not {'an' if kind[0] in 'aio' else 'a'} {kind}"]
    out = []
    if "enum" in node and value not in node["enum"]:
        out.append(f"{at}: {value!r}, allowed {', '.join(map(repr, node['enum']))}")
    if isinstance(value, int) and node.get("format") in FORMATS and not (
            -FORMATS[node["format"]] <= value < FORMATS[node["format"]]):
        out.append(f"{at}: {value} does not fit {node['format']}")
    if isinstance(value, str) and "pattern" in node and not re.search(node["pattern"], value):
        out.append(f"{at}: {value!r} does not match {node['pattern']}")
    if isinstance(value, dict):
        out += _object_problems(value, node, path, root)
    if isinstance(value, list):
        out += _array_problems(value, node, path, root)
    return out


def _object_problems(value: dict, node: dict[str, Any], path: str, root: dict) -> list[str]:
    out = [f"{path or '(the document)'}: {key} is required" for key in node.get("required", []) if key not in value]
    props, extra = node.get("properties", {}), node.get("additionalProperties", True)
    for key, sub in value.items():
        where = f"{path}.{key}" if path else key
        if key in props:
            out += problems(sub, props[key], where, root)
        elif extra is False:
            out.append(f"{where}: not a field this schema knows ({', '.join(sorted(props)) or 'none'} are)")
        elif isinstance(extra, dict):
            out += problems(sub, extra, where, root)
    return out


def _array_problems(value: list, node: dict[str, Any], path: str, root: dict) -> list[str]:
    out = []
    if "maxItems" in node and len(value) > node["maxItems"]:
        out.append(f"{path}: {len(value)} items, at most {node['maxItems']}")
    for i, item in enumerate(value):
        out += problems(item, node.get("items", {}), f"{path}[{i}]", root)
    if node.get("x-kubernetes-list-type") == "map":  # the API server refuses two entries with the same keys
        keys = node["x-kubernetes-list-map-keys"]
        seen = [tuple(item.get(k) for k in keys) for item in value if isinstance(item, dict)]
        out += [f"{path}: two entries with {', '.join(keys)} {dup}" for dup in sorted({s for s in seen
                                                                                       if seen.count(s) > 1})]
    return out


def webhook_problems(doc: dict[str, Any]) -> list[str]:
    """The two rules of JobSet's admission webhook a manifest can break by itself (jobset_webhook.go, v0.12.0), on a
    manifest the schema admits."""
    out, earlier = [], set()
    name = doc.get("metadata", {}).get("name", "")
    for rjob in doc.get("spec", {}).get("replicatedJobs", []):
        spec = rjob.get("template", {}).get("spec", {})
        if spec.get("completionMode") == "Indexed" and "completions" in spec:
            pod = _pod_name(name, rjob["name"], rjob.get("replicas", 1) - 1, spec["completions"] - 1)
            if len(pod) > 63 or not DNS_1035.match(pod):
                out.append(f"replicatedJobs {rjob['name']}: its pods would be named like {pod} (a DNS-1035 label of "
                           "63 characters at most)")
        out += [f"replicatedJobs {rjob['name']}: dependsOn {d.get('name')}, not an earlier replicated job"
                for d in rjob.get("dependsOn", []) if d.get("name") not in earlier]
        earlier.add(rjob["name"])
    return out


def validate(doc: dict[str, Any]) -> None:
    """ValueError naming every problem, or nothing. The webhook's rules are read only from a manifest the schema
    admits, as the API server runs them only on an object its schema has typed."""
    found = problems(doc) or webhook_problems(doc)
    if found:
        raise ValueError(f"the JobSet does not validate against {SCHEMA_FILE.name}: " + "; ".join(found))


def write(m: ManifestSpec, path: Path) -> dict[str, Any]:
    """Build, check and write the manifest (YAML); ValueError for bad input or a manifest that does not validate."""
    import yaml

    wrong = check(m)
    if wrong:
        raise ValueError("; ".join(wrong))
    doc = manifest(m)
    validate(doc)
    head = (f"# xmfu fleet manifest: {m.nodes} nodes, level {m.level}; kubectl apply -f {path.name} (needs the JobSet "
            f"controller, kubernetes-sigs/jobset, and a ReadWriteMany claim {m.results_claim}). docs/distributed.md\n")
    path.write_text(head + yaml.safe_dump(doc, sort_keys=False, width=120))
    return doc
