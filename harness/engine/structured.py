"""The structured configs derived from the settings' declarations (`xmfu.harness.engine.declare`), and validation
through them.

- `schema_of(cls)` derives the structured config that OmegaConf and Hydra's ConfigStore check values against: a
  mutable twin of the frozen declaration (OmegaConf makes the node of a frozen dataclass read-only, and Hydra merges
  into nodes), found by name in this module so that pickle refers to it instead of copying it;
- `parse_section(prefix, cls, data)` validates a mapping (unknown keys and types through OmegaConf, ranges through
  each field's check) and builds the frozen dataclass the engine or a workload reads;
- `translate(exc)` turns OmegaConf's error into the ConfigError naming the field and what its declaration allows.
This module imports nothing of ours but the declarations' module; OmegaConf is imported where it is used.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import typing
from collections.abc import Mapping
from dataclasses import MISSING
from typing import Any, TypeVar

from xmfu.harness.engine.declare import Check, ConfigError, Number, describe, kind, optional_inner

T = TypeVar("T")
OMEGACONF_MISSING = "???"  # omegaconf.MISSING: a required setting with no default


def _schema_type(hint: Any) -> Any:
    """The annotation OmegaConf gets: a declared dataclass becomes its schema, a tuple a list."""
    inner = optional_inner(hint)
    if inner is not None:
        return _schema_type(inner) | None
    if dataclasses.is_dataclass(hint):
        return schema_of(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return list[_schema_type(args[0])]
    if origin is dict:
        return dict[args[0], _schema_type(args[1])]
    return hint


def _schema_value(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return schema_of(type(value))(**{f.name: _schema_value(getattr(value, f.name))
                                         for f in dataclasses.fields(value)})
    if isinstance(value, (tuple, list)):
        return [_schema_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _schema_value(v) for k, v in value.items()}
    return value


def _schema_field(f: dataclasses.Field) -> Any:
    if f.default_factory is not MISSING:
        make = f.default_factory
        return dataclasses.field(default_factory=lambda: _schema_value(make()), metadata=f.metadata)
    if f.default is MISSING:
        return dataclasses.field(default=OMEGACONF_MISSING, metadata=f.metadata)
    value = _schema_value(f.default)
    if isinstance(value, (list, dict)) or dataclasses.is_dataclass(value):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(value), metadata=f.metadata)
    return dataclasses.field(default=value, metadata=f.metadata)


@functools.cache
def schema_of(cls: type) -> type:
    """The mutable dataclass OmegaConf and Hydra's ConfigStore take for the declared, frozen `cls`: the same
    names, types (tuples as lists), defaults and metadata. It is found by name in this module (`__getattr__`), so
    pickle refers to it rather than copying it (see there)."""
    hints = typing.get_type_hints(cls)
    specs = [(f.name, _schema_type(hints[f.name]), _schema_field(f)) for f in dataclasses.fields(cls)]
    schema = dataclasses.make_dataclass(cls.__name__, specs)
    schema.__doc__ = cls.__doc__
    schema.__module__ = __name__
    schema.__qualname__ = f"{SCHEMA}{cls.__module__}:{cls.__qualname__}".replace(".", "/")
    return schema


SCHEMA = "schema:"  # the prefix of a derived schema's name in this module; pickle splits names at dots: none here


def __getattr__(name: str) -> type:
    """A derived schema by the name `schema_of` gave it. A composed config refers to its schema classes; a launcher
    that pickles it for another process (Hydra's submitit launcher, through cloudpickle) then pickles a reference,
    not a copy of the class: reading a copy back in the launching process replaced the class's dataclass fields
    with ones `dataclasses.fields` no longer recognises (cloudpickle 2.1), and every later check lost its schema."""
    if not name.startswith(SCHEMA):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, qualname = name.removeprefix(SCHEMA).replace("/", ".").split(":")
    declared: Any = importlib.import_module(module)
    for part in qualname.split("."):
        declared = getattr(declared, part)
    return schema_of(declared)


# -- validation ------------------------------------------------------------------------------------------------


def _join(prefix: str, key: str) -> str:
    if not prefix:
        return key
    return f"{prefix}{key}" if key.startswith("[") else f"{prefix}.{key}"


def apply_check(check: Check, field: str, value: Any) -> None:
    """A setting's check on its value; on a list (a sweep), on every element, named field[i]."""
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            apply_check(check, f"{field}[{i}]", v)
    elif value is not None:
        check(field, value)


def _convert(hint: Any, value: Any, field: str) -> Any:
    """A validated plain value as the declared type holds it (nested settings built, lists as tuples)."""
    inner = optional_inner(hint)
    if inner is not None:
        return None if value is None else _convert(inner, value, field)
    if dataclasses.is_dataclass(hint) and isinstance(value, Mapping):
        return build(field, hint, value)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple and isinstance(value, list):
        return tuple(_convert(args[0], v, f"{field}[{i}]") for i, v in enumerate(value))
    if origin is dict and isinstance(value, Mapping):
        return {k: _convert(args[1], v, _join(field, str(k))) for k, v in value.items()}
    return value


def build(prefix: str, cls: type[T], values: Mapping[str, Any]) -> T:
    """`cls` from values OmegaConf has type-checked: each field's range check, then the frozen dataclass."""
    hints = _hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        field = _join(prefix, f.name)
        check = f.metadata.get("check")
        if check is not None:
            apply_check(check, field, values[f.name])
        out[f.name] = _convert(hints[f.name], values[f.name], field)
    return cls(**out)


def _check_sections(prefix: str, cls: type, data: Any) -> None:
    """A section given as something other than a mapping: OmegaConf's merge loses which one it was."""
    if not isinstance(data, Mapping):
        raise ConfigError(prefix, f"{data!r} is not a mapping", kind(cls))
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        section = optional_inner(hints[f.name]) or hints[f.name]
        if dataclasses.is_dataclass(section) and data.get(f.name) is not None:
            _check_sections(_join(prefix, f.name), section, data[f.name])


@functools.cache
def _structured(cls: type) -> Any:
    """OmegaConf's node for `cls`'s schema, built once (OmegaConf.merge copies it before merging into it)."""
    from omegaconf import OmegaConf

    return OmegaConf.structured(schema_of(cls))


def parse_section(prefix: str, cls: type[T], data: Any) -> T:
    """`data` (a mapping; missing settings take their declared defaults) as the declared dataclass `cls`.
    Unknown keys, wrong types and values out of range raise a ConfigError naming `prefix.key`.

    Data that is plain and already typed (see plain_values) is merged with the schema's defaults directly, giving
    what OmegaConf's merge gives; anything else goes through OmegaConf, which converts, resolves and refuses. At
    2,000 sizes OmegaConf's merge took 1.8 s of a bundle's validation (ListConfig.append), the plain path 0.06 s
    (issue 42 item 5)."""
    if data is None:
        data = {}
    _check_sections(prefix, cls, data)
    try:
        values = plain_values(cls, data if type(data) is dict else dict(data), _defaults(cls))
    except (NotPlain, RecursionError):
        values = _omegaconf_values(prefix, cls, data)
    return build(prefix, cls, values)


def _omegaconf_values(prefix: str, cls: type, data: Any) -> dict[str, Any]:
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        merged = OmegaConf.merge(_structured(cls), dict(data))  # a copy of the cached schema, data merged in
        return OmegaConf.to_container(merged, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as exc:
        raise translate(exc, prefix) from None


# -- plain data, without OmegaConf ------------------------------------------------------------------------------


class NotPlain(Exception):
    """Data the plain path does not answer for (a conversion, an interpolation, a merge, an error): OmegaConf
    reads it."""


@functools.cache
def _defaults(cls: type) -> dict[str, Any]:
    """The schema's values as OmegaConf holds them before a merge (a required one as "???"): what a setting the
    data leaves out takes, nested sections included. Read only: plain_values copies what it uses. Read from the
    declaration itself, as `schema_of` derives the schema's defaults (a dataclass as its fields, a tuple as a
    list), not through OmegaConf.to_container(OmegaConf.structured(...)), which gives the same values for every
    declared section (tests/test_config.py) but cost a command that reads one bundle a fifth of its CPU: importing
    OmegaConf and deriving the schema classes."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default_factory is not MISSING:
            out[f.name] = _declared_value(f.default_factory())
        elif f.default is MISSING:
            out[f.name] = OMEGACONF_MISSING
        else:
            out[f.name] = _declared_value(f.default)
    return out


def _declared_value(value: Any) -> Any:
    """A declared default as plain data: a dataclass as the dict of its fields, a tuple or list as a list."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _declared_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_declared_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _declared_value(v) for k, v in value.items()}
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """A declared class's fields' type hints, resolved once per class (typing.get_type_hints walks every base's
    annotations and evaluates each string: tens of milliseconds for the run settings' sections)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def plain_values(cls: type, data: Any, defaults: Any) -> dict[str, Any]:
    """What OmegaConf.to_container(OmegaConf.merge(schema, data)) gives, for data that needs none of what OmegaConf
    does beyond a merge (each key declared, each value of exactly its declared type: int, float, bool, str, an
    int or float for a Number, a list for a tuple, plain JSON-like data for Any, no string with an interpolation's
    `$` or MISSING's "???"); else NotPlain. A setting left out takes `defaults`' value (a nested section's, its
    section's), a section given is merged into its default key by key, any other value replaces its default."""
    if type(data) is not dict or type(defaults) is not dict:
        raise NotPlain
    hints = _hints(cls)
    if any(key not in hints for key in data):
        raise NotPlain  # an unknown setting: OmegaConf's error names it
    return {name: _plain_value(hint, data[name], defaults.get(name)) if name in data else _plain_json(defaults[name])
            for name, hint in hints.items()}


def _plain_value(hint: Any, value: Any, default: Any) -> Any:
    inner = optional_inner(hint)
    if inner is not None:
        return None if value is None else _plain_value(inner, value, default)
    if hint is Any:
        if _merged_by_omegaconf(value, default):
            raise NotPlain
        return _plain_json(value)
    if dataclasses.is_dataclass(hint):
        return plain_values(hint, value, default)  # merged into its default (a section with no default: NotPlain)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis and type(value) is list:
        return [_plain_value(args[0], v, None) for v in value]
    if type(value) in _exact(hint):
        return _plain_json(value)
    raise NotPlain  # a value OmegaConf would convert (2 for a float: 2.0) or refuse, or a type not handled here


def _merged_by_omegaconf(value: Any, default: Any) -> bool:
    """Whether OmegaConf does more with an Any setting's value than put it in its default's place: it merges a
    mapping into a mapping, refuses a mapping into a list and a list into a mapping (OmegaConf 2.3); a required Any
    given a list or mapping is left to it too."""
    if type(value) not in (dict, list):
        return False
    if type(default) is dict or default == OMEGACONF_MISSING:
        return True
    return type(value) is dict and type(default) is list


def _exact(hint: Any) -> tuple[type, ...]:
    """The types a scalar setting's value is taken in as it is (OmegaConf's node for it keeps them unchanged)."""
    if hint in (int, float, bool, str):
        return (hint,)
    return (int, float) if hint == Number else ()


def _plain_json(value: Any) -> Any:
    """A copy of JSON-like data OmegaConf keeps as it is; NotPlain for anything else (another type, a key that is
    not a string, a string OmegaConf would resolve or call missing)."""
    kind = type(value)
    if value is None or kind in (int, float, bool):
        return value
    if kind is str:
        if "$" in value or value == OMEGACONF_MISSING:
            raise NotPlain
        return value
    if kind is list:
        return [_plain_json(v) for v in value]
    if kind is dict and all(type(k) is str and "$" not in k for k in value):
        return {k: _plain_json(v) for k, v in value.items()}
    raise NotPlain


def _declaring_node(exc: Any) -> tuple[Any, Any, bool]:
    """(the dataclass that declares the setting an OmegaConf error is about, the setting's name, whether the
    error is about one element of that list setting)."""
    from omegaconf import ListConfig

    node, key, element = exc.parent_node, exc.key, False
    while isinstance(node, ListConfig):  # an element of a list setting: the setting is the list
        key, node, element = node._key(), node._get_parent(), True
    cls = getattr(getattr(node, "_metadata", None), "object_type", None)
    return (cls, key, element) if dataclasses.is_dataclass(cls) and isinstance(key, str) else (None, key, element)


def translate(exc: Exception, prefix: str = "") -> ConfigError:
    """OmegaConf's error (an unknown key, a wrong type, a missing value) as a ConfigError naming the field and
    what the declaration allows."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, MissingMandatoryValue, ValidationError

    key_path = getattr(exc, "full_key", None)
    field = _join(prefix, key_path) if isinstance(key_path, str) and key_path else prefix
    cls, key, element = _declaring_node(exc)
    names = [f.name for f in dataclasses.fields(cls)] if cls is not None else []
    if isinstance(exc, (ConfigKeyError, ConfigAttributeError)) and names and key not in names:
        return ConfigError(field, "unknown setting", ", ".join(names))
    if cls is None or key not in names:
        return ConfigError(field or prefix or "config", _first_line(exc))
    noun, accepted = describe(cls, key, element)
    if isinstance(exc, MissingMandatoryValue):
        return ConfigError(field, "is missing", accepted)
    if isinstance(exc, ValidationError):
        return ConfigError(field, f"{exc.value!r} is not {noun}", accepted)
    return ConfigError(field, _first_line(exc), accepted)


def _first_line(exc: Exception) -> str:
    """OmegaConf's own message without the lines it adds (full_key, object_type)."""
    text = str(getattr(exc, "msg", None) or exc).strip()
    return " ".join(text.splitlines()[0].split()) if text else type(exc).__name__
