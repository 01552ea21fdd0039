"""`xmfu run --help`: Hydra's help page, with every setting, its default and what it allows, read from the one
declaration of each (harness/config/run_settings.py RunSettings and the sections it holds; each workload's settings
class).

The page is Hydra's `hydra/help` config (harness/config/hydra_app.py registers it): Hydra fills in `$CONFIG`, the config
as the command line composed it; the settings list is written here once, when the config store is filled.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from xmfu.harness.config.run_settings import RunSettings
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


def backends_section(backends: Mapping[str, Sequence[str]]) -> list[str]:
    """Each workload's built-in backends, then the plug-in backends installed here (engine/plugins.py: read from
    the packages' metadata, nothing imported; each says which workload it is for when a run names it)."""
    from xmfu.harness.engine.plugins import installed

    out = ["== Backends ==", "backends=[NAME,...] picks some (null: every built-in one); a plug-in joins by name or "
           "by import path, backends=[torch_sdpa,my_pkg.attention:MyFlash] (docs/backends.md)", ""]
    out += [f"{name}: {', '.join(names)}" for name, names in sorted(backends.items())]
    plugins = installed()
    out += ["", "plug-ins installed (entry points of xmfu.backends):",
            *([f"  {p.describe()}" for p in plugins] or ["  none"])]
    return out


def settings_page(workloads: Mapping[str, type | None], groups: Mapping[str, list[str]],
                  backends: Mapping[str, Sequence[str]] | None = None) -> str:
    """The page below Hydra's header: the groups to choose from, the backends, then every setting with its
    default."""
    out = ["== Configuration groups ==", "Compose your configuration from those groups (group=option)", ""]
    out += [f"{group}: {', '.join(options)}" for group, options in sorted(groups.items()) if group != "hydra"]
    if backends is not None:
        out += ["", *backends_section(backends)]
    out += ["", "== Settings ==", "Every setting, its default and what it allows (override with KEY=VALUE)", ""]
    out += setting_lines("", RunSettings, skip=set(groups))
    for name, settings in sorted(workloads.items()):
        if settings is not None:
            out += ["", f"workload={name}:", *setting_lines("workload", settings)]
    out += ["", "model=NAME (configs/model/, for workload=transformer and inference):",
            *setting_lines("model", ModelSpec)]
    return "\n".join(out)


def help_config(workloads: Mapping[str, type | None], groups: Mapping[str, list[str]],
                backends: Mapping[str, Sequence[str]] | None = None) -> dict[str, str]:
    """Hydra's `hydra/help` node (hydra/conf/hydra/help/default.yaml's keys). Its template is a string.Template
    whose text is also an OmegaConf value: a `$` is doubled, and no setting's help may hold an interpolation."""
    page = settings_page(workloads, groups, backends)
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

