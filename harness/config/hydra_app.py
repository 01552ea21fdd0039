"""`xmfu run`: Hydra composes the config (overrides, multirun, launchers); xmfu checks it first.

Hydra composes configs/ on the structured configs derived from the settings' declarations (`register_configs`
puts them in Hydra's ConfigStore), so OmegaConf checks every value's type and refuses unknown keys while composing.
Every job's config is composed and validated before Hydra starts anything, so bad input is one clear
paragraph and exit status 2, never a traceback halfway through a sweep.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from xmfu.harness.config.run_settings import CONFIG_DIR, RunSettings, apply_scale, explicit_keys, parse_run_config
from xmfu.harness.engine import interrupts
from xmfu.harness.engine.declare import ConfigError
from xmfu.harness.engine.plugins import register_named
from xmfu.harness.engine.registry import Registry
from xmfu.harness.engine.settings import RunConfig
from xmfu.harness.engine.structured import schema_of, translate

MULTIRUN_FLAGS = ("-m", "--multirun")
# Hydra flags whose next word is theirs, not an override
VALUE_FLAGS = ("-c", "--cfg", "-p", "--package", "-cp", "--config-path", "-cn", "--config-name", "-cd",
               "--config-dir", "--experimental-rerun", "-sc", "--shell-completion")


INFO_FLAGS = ("-i", "--info")
INFO_CHOICES = ("all", "config", "defaults", "defaults-tree", "plugins", "searchpath")  # hydra/_internal/utils.py


def split_args(args: Sequence[str]) -> list[str]:
    """The overrides among `xmfu run`'s arguments (Hydra's own flags and their values left out)."""
    overrides, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
        elif a in VALUE_FLAGS:
            skip = True
        elif a in INFO_FLAGS:  # its value is optional: only one of Hydra's info topics belongs to it
            skip = i + 1 < len(args) and args[i + 1] in INFO_CHOICES
        elif not a.startswith("-"):
            overrides.append(a)
    return overrides


class UsageError(Exception):
    """Bad command-line input: printed as one paragraph, exit status 2."""


class _JobRefused(BaseException):
    """A job that cannot start here (device=gpu without one). A BaseException so that Hydra, which prints a
    traceback for any Exception a job raises (hydra/_internal/utils.py run_and_report), lets it through."""


def config_groups() -> dict[str, list[str]]:
    """Config groups (folders of configs/) and their options (file names)."""
    return {d.name: sorted(p.stem for p in d.glob("*.yaml")) for d in CONFIG_DIR.iterdir() if d.is_dir()}


RUN_SCHEMA = "run_schema"  # configs/config.yaml's first default
WORKLOAD_SCHEMAS = "workload_schema"  # configs/workload/<name>.yaml's first default: /workload_schema/<name>@_here_


def workload_schema(settings: type) -> Any:
    """A workload's structured config as its configs/workload file composes it: its declared settings, and the
    `smoke:` block that scale=smoke folds in (harness/config/run_settings.py apply_scale), a key of its own beside
    them (the spec never sees it, so it is no setting of the spec's)."""
    from omegaconf import OmegaConf, open_dict

    node = OmegaConf.structured(schema_of(settings))
    with open_dict(node):
        node.smoke = None
    return node


@functools.cache
def register_configs() -> None:
    """Fill Hydra's ConfigStore, once per process: the run's schema, each workload's, and `xmfu run --help`'s page,
    all derived from the declarations. The built-in workloads are the catalog's (plug-ins add backends only)."""
    from hydra.core.config_store import ConfigStore

    from xmfu.harness.config.run_help import help_config
    from xmfu.workloads.catalog import build_registry

    registry = build_registry()
    workloads = {name: registry.workload(name).settings for name in registry.backends_by_workload()}
    store = ConfigStore.instance()
    store.store(name=RUN_SCHEMA, node=schema_of(RunSettings))
    for name, settings in workloads.items():
        if settings is not None:
            store.store(group=WORKLOAD_SCHEMAS, name=name, node=workload_schema(settings))
    store.store(group="hydra/help", name="xmfu", node=help_config(workloads, config_groups(),
                                                                  registry.backends_by_workload()))


def _is_hydra_override(text: str) -> bool:
    return text.lstrip("+~").startswith(("hydra.", "hydra/"))


def _parse(overrides: Sequence[str]) -> list[Any]:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    try:
        return OverridesParser.create().parse_overrides(list(overrides))
    except OverrideParseException as exc:
        first = str(exc).strip().splitlines()[0]
        raise UsageError(f"malformed override: {first}. Overrides are key=value, e.g. dtype=bf16, "
                         "backends=[torch,jax] or workload.sizes=[1024,2048]") from None


def split_jobs(overrides: Sequence[str], multirun: bool) -> list[list[str]]:
    """The override list of every job a (multi)run would launch."""
    parsed = _parse(overrides)
    if not multirun:
        return [list(overrides)]
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    return [job for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def _check_group_choices(job: Sequence[str]) -> None:
    groups = config_groups()
    parsed = _parse(job)
    # Hydra keeps the last of two choices of one group without a word: `experiment=mamf experiment=smoke` would
    # run the smoke suite alone, and the user believes they shrank mamf (issue 30)
    experiments = [str(o.input_line) for o in parsed if o.key_or_group == "experiment" and not o.is_delete()]
    if len(experiments) > 1:
        raise UsageError(f"experiment is chosen {len(experiments)} times ({', '.join(experiments)}); Hydra would "
                         f"keep only the last, {experiments[-1]}, and run it instead of the others. One experiment "
                         "per run: keep the one you mean (experiment=smoke is its own experiment, the chosen "
                         "workload at its smoke sizes; it does not shrink another experiment)")
    for override in parsed:
        group = override.key_or_group
        if group in groups and override.value() not in (None, "null") and not override.is_delete():
            value = override.value()
            if isinstance(value, str) and value not in groups[group]:
                raise UsageError(f"unknown {group} '{value}'. Allowed: {', '.join(groups[group])}")


def _unknown_key(exc: Exception, base: dict[str, Any]) -> str | None:
    text = str(exc)
    if "Could not override '" not in text or not ("not in struct" in text or "To append" in text):
        return None
    key = text.split("Could not override '", 1)[1].split("'", 1)[0]
    node: Any = base
    parent = key.rsplit(".", 1)[0] if "." in key else ""
    for part in parent.split(".") if parent else []:
        node = node.get(part, {}) if isinstance(node, dict) else {}
    allowed = ", ".join(sorted(node)) if isinstance(node, dict) else "none"
    return f"unknown setting '{key}'. Allowed {'in ' + parent if parent else 'top-level settings'}: {allowed}"


def _composition_error(exc: Exception, overrides: Sequence[str]) -> str:
    """Hydra's error as one paragraph; an unknown key lists the keys of the config the user chose (the
    overrides that pick groups are kept, so `workload=transformer workload.foo=1` lists the transformer's); a value
    OmegaConf refused names the field and what its declaration allows, as the checks after composing do."""
    from hydra import compose
    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue, ValidationError

    if isinstance(exc.__cause__, (ValidationError, MissingMandatoryValue)):
        return f"invalid configuration: {translate(exc.__cause__)}"

    groups = [o for o in overrides if "." not in o.split("=", 1)[0].lstrip("+~")]
    try:
        base = OmegaConf.to_container(compose("config", overrides=groups), resolve=False)
    except Exception:  # the group choices themselves are wrong: fall back to the defaults
        base = OmegaConf.to_container(compose("config"), resolve=False)
    return _unknown_key(exc, base) or " ".join(str(exc).split())


def compose_job(job: Sequence[str]) -> tuple[dict[str, Any], str]:
    """Compose one job's config as Hydra will (its hydra.* overrides aside); returns (mapping, yaml)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    _check_group_choices(job)
    register_configs()
    plain = [o for o in job if not _is_hydra_override(o)]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3", job_name="xmfu"):
        try:
            cfg = compose("config", overrides=plain)
        except Exception as exc:  # Hydra's composition errors: translated below, never a traceback
            raise UsageError(_composition_error(exc, plain)) from None
    try:
        return OmegaConf.to_container(cfg, resolve=True), OmegaConf.to_yaml(cfg, resolve=True)
    except Exception as exc:  # interpolation errors in user values
        raise UsageError(" ".join(str(exc).split())) from None


def validate_job(job: Sequence[str], registry: Registry) -> RunConfig:
    from xmfu.harness.run import plan_phases

    data, _ = compose_job(job)
    register_named(registry, data)  # the plug-in backends the job names (engine/plugins.py)
    cfg = parse_run_config(data, registry.backends_by_workload(), explicit_keys(job))
    plan_phases(cfg, registry)  # workload sizes are checked when they expand into cases
    return cfg


def run_command(args: Sequence[str], registry: Registry) -> int:
    """Validate every job, then hand the command line to Hydra, which calls `_job` once per job."""
    multirun = any(a in MULTIRUN_FLAGS for a in args)
    overrides = split_args(args)
    try:
        configs = [validate_job(job, registry) for job in split_jobs(overrides, multirun)]
    except ConfigError as exc:
        raise UsageError(f"invalid configuration: {exc}") from None
    if not multirun or _is_info_request(args):
        return _launch(args, registry)
    _check_launcher(overrides)
    sweep_dir = next((o.split("=", 1)[1] for o in overrides if o.startswith("hydra.sweep.dir=")), None)
    if sweep_dir is None:  # chosen here, so the jobs' outcomes can be read back whatever launcher ran them
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        sweep_dir = str(Path(configs[0].results_dir) / "multirun" / stamp)
        args = [*args, f"hydra.sweep.dir={sweep_dir}"]
    code = _launch(args, registry)
    return max(code, sweep_summary(Path(sweep_dir), len(configs)))


def _check_launcher(overrides: Sequence[str]) -> None:
    """A multirun through Hydra's Slurm launcher on a machine without Slurm: one paragraph, before any job.
    submitit refuses it only inside Hydra's sweep, as a traceback: its SlurmExecutor.__init__ raises
    RuntimeError('Could not detect "srun", are you indeed on a slurm cluster?') when `SlurmExecutor.affinity()`,
    `-1 if shutil.which("srun") is None else 2`, is not > 0 (submitit 1.5.4, submitit/slurm/slurm.py)."""
    import shutil

    from hydra import compose, initialize_config_dir

    choices = [o for o in overrides if o.lstrip("+").startswith("hydra/launcher=")]
    if not choices or shutil.which("srun") is not None:
        return
    register_configs()
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3", job_name="xmfu"):
            target = str(compose("config", overrides=choices, return_hydra_config=True).hydra.launcher._target_)
    except Exception:  # a launcher that does not compose (its plugin missing): Hydra names that itself
        return
    if target.endswith(".SlurmLauncher"):  # hydra_submitit_launcher 1.2's Slurm launcher class
        raise UsageError(f"{choices[-1]} submits to Slurm, and this machine has no Slurm (no `srun` on PATH). "
                         "Run it on a Slurm login node, or on this machine: hydra/launcher=submitit_local (the "
                         "same tasks here), or torchrun (docs/distributed.md); `--cfg hydra` prints the job it "
                         "would submit without submitting it")


def _is_info_request(args: Sequence[str]) -> bool:
    return any(a in ("--cfg", "-c", "--info", "-i", "--help", "-h", "--hydra-help", "-sc", "--shell-completion")
               for a in args)


JOB_FILE = "xmfu-job.json"


def sweep_summary(sweep_dir: Path, expected: int) -> int:
    """Print every job's outcome, numbered, and one closing line; returns the sweep's exit status (a job that
    left no outcome, e.g. a Slurm job that died, counts as failed)."""
    found = {}
    for path in sorted(sweep_dir.glob(f"*/{JOB_FILE}")):
        try:
            record = json.loads(path.read_text())
            found[int(record["job"])] = record
        except (OSError, ValueError, KeyError):
            continue
    for num in range(expected):
        r = found.get(num)
        if r is None:
            print(f"job {num}: no outcome recorded (the job failed before it finished)")
        else:
            print(f"job {num} ({' '.join(r['overrides'])}): exit {r['exit_code']}, bundle: {r['bundle']}")
    failed = expected - sum(1 for r in found.values() if r["exit_code"] == 0)
    print(f"sweep: {expected} jobs, {expected - failed} succeeded, {failed} did not; outcomes in {sweep_dir}")
    return 0 if failed == 0 else max([1, *(r["exit_code"] for r in found.values())])


def _record_job(hydra_cfg: Any, outcome: Any, overrides: list[str]) -> None:
    """In a multirun, each job leaves its outcome in its own sweep folder for the closing summary. A job of
    several tasks (submitit's tasks_per_node, one rank each) is recorded by rank 0, the rank that writes the
    bundle: the other ranks' outcomes name no bundle on disk."""
    from hydra.types import RunMode

    from xmfu.harness.machine.ranks import process_info

    if hydra_cfg.mode != RunMode.MULTIRUN or not process_info().writes_bundle:
        return
    folder = Path(hydra_cfg.runtime.output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    record = {"job": int(hydra_cfg.job.num), "overrides": overrides, "exit_code": outcome.exit_code,
              "bundle": str(outcome.bundle)}
    (folder / JOB_FILE).write_text(json.dumps(record) + "\n")


def _launch(args: Sequence[str], registry: Registry) -> int:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, OmegaConf

    from xmfu.harness.machine.platform import NoAcceleratorError
    from xmfu.harness.run import SetupError, execute

    codes: list[int] = []

    def _job(cfg: DictConfig) -> None:
        data = OmegaConf.to_container(cfg, resolve=True)
        task_overrides = list(HydraConfig.get().overrides.task)
        explicit = explicit_keys(task_overrides)
        try:  # validate_job did in this process; a launcher's process (submitit) does it here
            register_named(registry, data)
        except ConfigError as exc:
            raise _JobRefused(f"invalid configuration: {exc}") from None
        run_cfg = parse_run_config(data, registry.backends_by_workload(), explicit)
        resolved = OmegaConf.to_yaml(OmegaConf.create(apply_scale(data, explicit).data))  # what actually ran
        try:
            outcome = execute(run_cfg, registry, resolved, ["xmfu", "run", *args], task_overrides)
        except (NoAcceleratorError, SetupError) as exc:
            raise _JobRefused(str(exc)) from None
        codes.append(outcome.exit_code)
        _record_job(HydraConfig.get(), outcome, task_overrides)
        if outcome.exit_code == 130:
            raise SystemExit(130)  # Ctrl-C stops the rest of a sweep too

    register_configs()
    saved = sys.argv
    sys.argv = ["xmfu run", *args]
    try:
        with interrupts.recorded():  # Hydra's own code between here and the job never sees a KeyboardInterrupt
            hydra.main(config_path=str(CONFIG_DIR), config_name="config", version_base="1.3")(_job)()
    except ValueError as exc:  # Hydra's own flag conflicts (e.g. --cfg with -m), raised before any job
        if codes:
            raise
        raise UsageError(str(exc)) from None
    except _JobRefused as exc:
        raise UsageError(str(exc)) from None
    finally:
        sys.argv = saved
    return max(codes, default=0)
