"""`xmfu run`: Hydra composes the config (overrides, multirun, launchers); xmfu checks it first.

Every job's config is composed and validated before Hydra starts anything, so bad input is one clear
paragraph and exit status 2, never a traceback halfway through a sweep.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.config import apply_scale, explicit_workload_keys, parse_run_config
from harness.engine.registry import Registry
from harness.engine.settings import ConfigError, RunConfig


def _config_dir() -> Path:
    """The config groups: `harness/conf/` in an installed package (a wheel or `pip install .`: pyproject.toml's
    package-dir ships the repository's configs/ as the package `harness.conf`), else the checkout's own
    configs/ (a source tree, or `pip install -e .`, which leaves every file where it is).

    Hydra gets the folder as an absolute path (file://): hydra.main and initialize_config_dir take one as is
    (hydra 1.3.8 _internal/utils.py compute_search_path_dir). `pkg://harness.conf` would need configs/ importable
    as that module, which a source checkout on PYTHONPATH never is.
    """
    here = Path(__file__).resolve().parent
    packaged = here / "conf"
    return packaged if packaged.is_dir() else here.parent / "configs"


CONFIG_DIR = _config_dir()
MULTIRUN_FLAGS = ("-m", "--multirun")
VALUE_FLAGS = ("-c", "--cfg", "-p", "--package", "-cp", "--config-path", "-cn", "--config-name", "-cd",
               "--config-dir", "--experimental-rerun")  # Hydra flags whose next word is theirs, not an override


def split_args(args: Sequence[str]) -> list[str]:
    """The overrides among `xmfu run`'s arguments (Hydra's own flags and their values left out)."""
    overrides, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in VALUE_FLAGS:
            skip = True
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
    for override in _parse(job):
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


def compose_job(job: Sequence[str]) -> tuple[dict[str, Any], str]:
    """Compose one job's config as Hydra will (its hydra.* overrides aside); returns (mapping, yaml)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    _check_group_choices(job)
    plain = [o for o in job if not _is_hydra_override(o)]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3", job_name="xmfu"):
        try:
            cfg = compose("config", overrides=plain)
        except Exception as exc:  # Hydra's composition errors: translated below, never a traceback
            base = OmegaConf.to_container(compose("config"), resolve=False)
            message = _unknown_key(exc, base) or " ".join(str(exc).split())
            raise UsageError(message) from None
    try:
        return OmegaConf.to_container(cfg, resolve=True), OmegaConf.to_yaml(cfg, resolve=True)
    except Exception as exc:  # interpolation errors in user values
        raise UsageError(" ".join(str(exc).split())) from None


def validate_job(job: Sequence[str], registry: Registry) -> RunConfig:
    from harness.run import plan_phases

    data, _ = compose_job(job)
    cfg = parse_run_config(data, registry.backends_by_workload(), explicit_workload_keys(job))
    plan_phases(cfg, registry)  # workload sizes are checked when they expand into cases
    return cfg


def run_command(args: Sequence[str], registry: Registry) -> int:
    """Validate every job, then hand the command line to Hydra, which calls `_job` once per job."""
    multirun = any(a in MULTIRUN_FLAGS for a in args)
    overrides = split_args(args)
    try:
        for job in split_jobs(overrides, multirun):
            validate_job(job, registry)
    except ConfigError as exc:
        raise UsageError(f"invalid configuration: {exc}") from None
    return _launch(args, registry)


def _launch(args: Sequence[str], registry: Registry) -> int:
    import hydra
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import DictConfig, OmegaConf

    from harness.machine.platform import NoAcceleratorError
    from harness.run import execute

    codes: list[int] = []

    def _job(cfg: DictConfig) -> None:
        data = OmegaConf.to_container(cfg, resolve=True)
        task_overrides = list(HydraConfig.get().overrides.task)
        explicit = explicit_workload_keys(task_overrides)
        run_cfg = parse_run_config(data, registry.backends_by_workload(), explicit)
        resolved = OmegaConf.to_yaml(OmegaConf.create(apply_scale(data, explicit)))  # what actually ran
        try:
            outcome = execute(run_cfg, registry, resolved, ["xmfu", "run", *args], task_overrides)
        except NoAcceleratorError as exc:
            raise _JobRefused(str(exc)) from None
        codes.append(outcome.exit_code)
        if outcome.exit_code == 130:
            raise SystemExit(130)  # Ctrl-C stops the rest of a sweep too

    saved = sys.argv
    sys.argv = ["xmfu run", *args]
    try:
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
