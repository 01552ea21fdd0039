"""`xmfu fleet manifest` (harness/fleet/jobset.py): the JobSet validates offline against the project's minimal copy
of the JobSet CRD's openAPIV3Schema (harness/fleet/jobset_schema.json), also by the jsonschema package as a second
opinion; broken manifests are refused by the checker, so the check can fail; bad input exits 2, nothing written."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from xmfu.harness.cli.fleet import cmd_fleet
from xmfu.harness.fleet import job, jobset
from xmfu.harness.fleet.spec import FleetSpec


def _doc(nodes: int = 4, **kw: Any) -> dict[str, Any]:
    return jobset.manifest(jobset.ManifestSpec(kw.pop("name", "demo"), nodes, **kw))


def _roles(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in doc["spec"]["replicatedJobs"]}


def _pod(role: dict[str, Any]) -> dict[str, Any]:
    return role["template"]["spec"]["template"]["spec"]


@pytest.mark.parametrize("nodes, kw", [(2, {}), (3, {"level": "medium"}), (7, {"gpus_per_node": 8}),
                                       (64, {"gpus_per_node": 8, "gpu_resource": "amd.com/gpu", "level": "long",
                                             "namespace": "acceptance", "image": "registry.example/xmfu:rocm"})])
def test_the_manifest_validates_by_the_checker_and_by_jsonschema(nodes, kw):
    doc = _doc(nodes, **kw)
    assert jobset.problems(doc) == [] and jobset.webhook_problems(doc) == []
    jobset.validate(doc)
    schema = jobset.schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert list(jsonschema.Draft202012Validator(schema).iter_errors(doc)) == []


def test_one_replicated_job_per_role_in_order_each_after_the_one_before():
    doc = _doc(7)
    assert doc["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and doc["kind"] == "JobSet"
    roles = _roles(doc)
    assert list(roles) == ["nodes", "links", "all"]
    shape = {name: (r["replicas"], r["template"]["spec"]["completionMode"], r["template"]["spec"]["completions"],
                    r["template"]["spec"]["parallelism"]) for name, r in roles.items()}
    assert shape == {"nodes": (1, "Indexed", 7, 7), "links": (3, "Indexed", 2, 2), "all": (1, "Indexed", 7, 7)}
    assert "dependsOn" not in roles["nodes"]
    assert roles["links"]["dependsOn"] == [{"name": "nodes", "status": "Complete"}]
    assert roles["all"]["dependsOn"] == [{"name": "links", "status": "Complete"}]
    for name, role in roles.items():  # one pod of the role per node
        term = _pod(role)["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert term == [{"labelSelector": {"matchLabels": {"jobset.sigs.k8s.io/jobset-name": "demo",
                                                           "jobset.sigs.k8s.io/replicatedjob-name": name}},
                         "topologyKey": "kubernetes.io/hostname"}]
        assert _pod(role)["restartPolicy"] == "Never" and role["template"]["spec"]["backoffLimit"] == 0


def test_the_pods_run_the_slurm_jobs_commands_with_ranks_from_the_completion_index():
    doc = _doc(4, gpus_per_node=8)
    roles = _roles(doc)
    fleet = FleetSpec("demo", 4, "quick", "quick", "/results")
    same = [w.replace("$F", "/results/demo") for w in job.node_steps(fleet, ["$(NODE_NAME)"])[0].command]
    (check,) = _pod(roles["nodes"])["containers"]
    assert check["args"] == same and "command" not in check  # the image's entrypoint: xmfu
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in check["env"]
    assert check["resources"] == {"limits": {"nvidia.com/gpu": 8}}
    (link,) = _pod(roles["links"])["containers"]
    assert link["args"] == list(job.link_command("pair-$(JOB_INDEX)", "/results/demo/links"))
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in link["env"]}
    assert env["RANK"] == {"fieldRef": {"fieldPath": jobset.COMPLETION_INDEX}}
    assert env["WORLD_SIZE"] == "2" and env["MASTER_ADDR"] == "demo-links-$(JOB_INDEX)-0.demo"
    names = [e["name"] for e in link["env"]]
    assert names.index("JOB_INDEX") < names.index("MASTER_ADDR")  # $(VAR) expands only from earlier entries
    pod = _pod(roles["all"])
    collective, training = job.all_steps(fleet)
    assert [c["args"] for c in pod["initContainers"]] == [[w.replace("$F", "/results/demo") for w in
                                                          collective.command]]
    assert [c["args"] for c in pod["containers"]] == [[w.replace("$F", "/results/demo") for w in training.command]]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["WORLD_SIZE"] == "4" and env["MASTER_ADDR"] == "demo-all-0-0.demo"
    assert doc["spec"]["network"]["enableDNSHostnames"] is True


def _set(path: str, value: Any) -> Callable[[dict], None]:
    def change(doc: dict) -> None:
        *parents, last = path.split("/")
        node: Any = doc
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if value is _DELETE:
            del node[last]
        elif isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value
    return change


_DELETE = object()
POD = "spec/replicatedJobs/0/template/spec/template/spec"

BROKEN = {
    "apiVersion of another group": (_set("apiVersion", "batch/v1"), "apiVersion"),
    "a field the CRD does not have": (_set("spec/replicatedJobs/0/template/spec/completionsPerNode", 2),
                                      "completionsPerNode: not a field"),
    "a misspelt pod field": (_set(f"{POD}/restartpolicy", "Never"), "restartpolicy: not a field"),
    "replicas as a string": (_set("spec/replicatedJobs/1/replicas", "2"), "replicas: str"),
    "replicas beyond int32": (_set("spec/replicatedJobs/1/replicas", 2**31), "int32"),
    "a pod without containers": (_set(f"{POD}/containers", _DELETE), "containers is required"),
    "a container without a name": (_set(f"{POD}/containers/0/name", _DELETE), "name is required"),
    "dependsOn status not Ready or Complete": (_set("spec/replicatedJobs/1/dependsOn/0/status", "Done"), "allowed"),
    "an env value that is a number": (_set(f"{POD}/containers/0/env/0/value", 1), "value: int"),
    "a GPU count that is no quantity": (_set(f"{POD}/containers/0/resources", {"limits": {"nvidia.com/gpu": "8 GPUs"}}),
                                        "does not match"),
    "two replicated jobs of one name": (_set("spec/replicatedJobs/2/name", "links"), "two entries with name"),
    "args not a list": (_set(f"{POD}/containers/0/args", "run experiment=fleet-quick"), "not an array"),
    "dependsOn a later role": (_set("spec/replicatedJobs/1/dependsOn/0/name", "all"), "not an earlier"),
    "a name too long for its pods": (_set("metadata/name", "x" * 50), "63 characters"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_manifest_is_refused(case):
    change, said = BROKEN[case]
    doc = copy.deepcopy(_doc(4, gpus_per_node=8))
    change(doc)
    with pytest.raises(ValueError) as refused:
        jobset.validate(doc)
    assert said in str(refused.value), str(refused.value)


def test_jsonschema_agrees_where_its_keywords_reach():
    """The schema's standard keywords mean the same to jsonschema: the broken manifests it can judge it refuses
    too (the list-map keys, int32 range and the webhook's rules are Kubernetes', which it does not know)."""
    validator = jsonschema.Draft202012Validator(jobset.schema())
    for case in ("apiVersion of another group", "a field the CRD does not have", "replicas as a string",
                 "a pod without containers", "dependsOn status not Ready or Complete", "an env value that is a number",
                 "a GPU count that is no quantity", "args not a list"):
        doc = copy.deepcopy(_doc(4, gpus_per_node=8))
        BROKEN[case][0](doc)
        assert list(validator.iter_errors(doc)), case


def test_the_schema_file_names_its_source_and_the_checker_refuses_keywords_it_does_not_apply(tmp_path, monkeypatch):
    source = json.loads(jobset.SCHEMA_FILE.read_text())["source"]
    assert source["repository"] == "https://github.com/kubernetes-sigs/jobset"
    assert source["path"] == "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"
    assert source["release"] == "v0.12.0" and len(source["commit"]) == 40
    widened = json.loads(jobset.SCHEMA_FILE.read_text())
    widened["schema"]["properties"]["metadata"]["minProperties"] = 1
    (tmp_path / "s.json").write_text(json.dumps(widened))
    monkeypatch.setattr(jobset, "SCHEMA_FILE", tmp_path / "s.json")
    jobset.schema.cache_clear()
    try:
        with pytest.raises(ValueError, match="minProperties"):
            jobset.schema()
    finally:
        jobset.schema.cache_clear()


def test_fleet_manifest_writes_a_yaml_that_validates(tmp_path, capsys):
    out = tmp_path / "fleet.yaml"
    assert cmd_fleet(["manifest", "--nodes", "5", "--name", "acc-1", "--gpus-per-node", "8", "--image",
                      "registry.example/xmfu:cuda", "-o", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    jobset.validate(doc)
    assert doc == _doc(5, name="acc-1", gpus_per_node=8, image="registry.example/xmfu:cuda")
    assert "&id" not in out.read_text()  # no YAML aliases: every container written out
    said = capsys.readouterr().out
    assert str(out) in said and "kubectl apply -f" in said


def _exit_status(args: list[str]) -> int:
    """cmd_fleet's status; argparse's own refusals (a choice not allowed) end in SystemExit, with the same status."""
    try:
        return cmd_fleet(args)
    except SystemExit as ended:
        return int(ended.code)


@pytest.mark.parametrize("args, said", [
    (["--nodes", "1"], "--nodes 1: at least 2"),
    (["--nodes", "4", "--name", "Bad_Name"], "DNS-1035"),
    (["--nodes", "4", "--name", "a" * 60], "too long"),
    (["--nodes", "4", "--gpu-resource", "gpu"], "nvidia.com/gpu"),
    (["--nodes", "4", "--gpus-per-node", "-1"], "--gpus-per-node -1"),
    (["--nodes", "4", "--namespace", "No"], "--namespace"),
    (["--nodes", "4", "--level", "slow"], "invalid choice"),
    (["--nodes", "4", "--image", "a b"], "--image"),
])
def test_bad_input_is_one_paragraph_exit_2_and_nothing_written(tmp_path, capsys, args, said):
    out = tmp_path / "fleet.yaml"
    assert _exit_status(["manifest", *args, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_an_output_folder_that_does_not_exist_is_bad_input(tmp_path, capsys):
    assert cmd_fleet(["manifest", "--nodes", "2", "-o", str(tmp_path / "no" / "f.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_no_role_is_written_that_the_checker_was_not_given(tmp_path):
    """The manifest for many nodes stays within the webhook's name limits with the default name."""
    m = jobset.ManifestSpec("xmfu-fleet-abc123", 1024)
    assert jobset.check(m) == []
    jobset.write(m, Path(tmp_path / "big.yaml"))
