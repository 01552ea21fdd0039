"""`xmfu run --help`: Hydra's help page, with every setting, its default and what it allows, read from the one
declaration of each (harness/config.py RunSettings and the sections it holds; each workload's settings class).

The page is Hydra's `hydra/help` config (harness/hydra_app.py registers it): Hydra fills in `$CONFIG`, the config
as the command line composed it; the settings list is written here once, when the config store is filled.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from xmfu.harness.config import RunSettings
from xmfu.harness.engine.declare import allowed, default_of
from xmfu.workloads.transformer.spec import ModelSpec

WIDTH = 40  # the column the help text starts in
REQUIRED = "<preset>"  # shown for a setting with no default (a model preset states every size)


def render(value: Any) -> str:
    """A default as it would be written in YAML or on the command line."""
    if value is None:
        return "null"
    if value is REQUIRED:
        return value
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(render(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {render(v)}" for k, v in value.items()) + "}"
    return str(value)


def setting_lines(prefix: str, cls: type, skip: Collection[str] = ()) -> list[str]:
    """One line per setting of the declared dataclass `cls`: KEY=DEFAULT, its help and what it allows. Nested
    sections (timing, telemetry...) are listed setting by setting; a suite's definition as one line; the names in
    `skip` (the config groups `workload` and `model`, whose options are listed on their own) not at all."""
    hints = typing.get_type_hints(cls)
    lines = []
    for f in dataclasses.fields(cls):
        key = f"{prefix}.{f.name}" if prefix else f.name
        declared = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        default = default_of(cls, f.name) if declared else REQUIRED
        if dataclasses.is_dataclass(default):
            lines += setting_lines(key, type(default))
            continue
        if key in skip:
            continue
        accepted = allowed(f, hints[f.name])
        text = " ".join(f.metadata.get("help", "").split())
        if accepted and accepted not in text:
            text += f" [{accepted}]"
        lines.append(f"  {key}={render(default)}".ljust(WIDTH) + f" {text}".rstrip())
    return lines


def settings_page(workloads: Mapping[str, type | None], groups: Mapping[str, list[str]]) -> str:
    """The page below Hydra's header: the groups to choose from, then every setting with its default."""
    out = ["== Configuration groups ==", "Compose your configuration from those groups (group=option)", ""]
    out += [f"{group}: {', '.join(options)}" for group, options in sorted(groups.items()) if group != "hydra"]
    out += ["", "== Settings ==", "Every setting, its default and what it allows (override with KEY=VALUE)", ""]
    out += setting_lines("", RunSettings, skip=set(groups))
    for name, settings in sorted(workloads.items()):
        if settings is not None:
            out += ["", f"workload={name}:", *setting_lines("workload", settings)]
    out += ["", "model=NAME (configs/model/, for workload=transformer and inference):",
            *setting_lines("model", ModelSpec)]
    return "\n".join(out)


def help_config(workloads: Mapping[str, type | None], groups: Mapping[str, list[str]]) -> dict[str, str]:
    """Hydra's `hydra/help` node (hydra/conf/hydra/help/default.yaml's keys). Its template is a string.Template
    whose text is also an OmegaConf value: a `$` is doubled, and no setting's help may hold an interpolation."""
    page = settings_page(workloads, groups)
    if "${" in page:
        raise ValueError("a setting's help holds an OmegaConf interpolation")
    page = page.replace("$", "$$")
    template = "\n".join(["${hydra.help.header}", page, "", "== Config ==",
                          "The config this command line composes (override anything: foo.bar=value)", "",
                          "$CONFIG", "${hydra.help.footer}"])
    return {"app_name": "xmfu run",
            "header": "xmfu run: measure a workload through every chosen backend (Hydra composes the config).\n",
            "footer": "Powered by Hydra (https://hydra.cc); xmfu run --hydra-help shows Hydra's own flags.\n",
            "template": template}


SETTINGS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "settings.md"  # a checkout's docs/settings.md


def docs_page() -> str:
    """docs/settings.md: the settings page of `xmfu run --help`, for readers of the manual."""
    from xmfu.harness.hydra_app import config_groups
    from xmfu.workloads.catalog import build_registry

    registry = build_registry()
    workloads = {name: registry.workload(name).settings for name in registry.backends_by_workload()}
    return "\n".join([
        "# Settings", "", "[Index](README.md) · [Running](running.md)", "",
        "<!-- Generated from the settings' declarations by `python -m xmfu.harness.cli.run_help`; do not edit. -->",
        "", "Every setting of `xmfu run`, its default and what it allows, as `xmfu run --help` prints them. Each is",
        "declared once, in code (harness/config.py `RunSettings` and the sections it holds; each workload's settings",
        "class in its spec; `ModelSpec` for the presets); the YAML under configs/ states only what differs.", "",
        "```", settings_page(workloads, config_groups()), "```", ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m xmfu.harness.cli.run_help",
                                     description="write docs/settings.md from the declarations")
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/settings.md is out of date")
    ns = parser.parse_args(argv)
    text = docs_page()
    current = SETTINGS_PAGE.read_text() if SETTINGS_PAGE.exists() else None
    if ns.check:
        if current != text:
            print(f"out of date: {SETTINGS_PAGE} (run python -m xmfu.harness.cli.run_help)")
        return int(current != text)
    if current != text:
        SETTINGS_PAGE.write_text(text)
        print(f"wrote {SETTINGS_PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
