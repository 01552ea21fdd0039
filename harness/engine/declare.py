"""Settings declared once, and checked against that one declaration.

A setting is a field of a frozen dataclass, made with `setting(default, help, check)`: its type is the annotation,
its default, its line of help and the range its type cannot express (`Range`, `OneOf`) live in the field. From
that declaration alone:
- `schema_of(cls)` derives the structured config that OmegaConf and Hydra's ConfigStore check values against
  (a mutable twin: OmegaConf makes the node of a frozen dataclass read-only, and Hydra merges into nodes);
- `parse_section(prefix, cls, data)` validates a mapping (unknown keys and types through OmegaConf, ranges through
  each field's check) and builds the frozen dataclass that the engine or a workload reads;
- `allowed(field)` says what a setting accepts, for the errors and for `xmfu run --help`.
A bad value is a `ConfigError` naming the dotted field and what is allowed; the CLI prints it as one paragraph.
This module imports nothing of ours; OmegaConf is imported where it is used.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass
from typing import Any, TypeVar, Union

T = TypeVar("T")
Number = int | float  # OmegaConf keeps an int an int here (a `float` field makes 2 into 2.0, and a comparability key)
OMEGACONF_MISSING = "???"  # omegaconf.MISSING: a required setting with no default


class ConfigError(ValueError):
    """A configuration value is invalid. `field` is the dotted config path, `allowed` what would be valid."""

    def __init__(self, field: str, problem: str, allowed: str = "") -> None:
        self.field = field
        self.problem = problem
        self.allowed = allowed
        text = f"{field}: {problem}"
        if allowed:
            text += f". Allowed: {allowed}"
        super().__init__(text)


def number(field: str, value: Any, *, integer: bool, minimum: float, inclusive: bool = False) -> Any:
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(field, f"{value!r} is not {kind}", f"{kind} {'>=' if inclusive else '>'} {minimum:g}")
    if integer and not float(value).is_integer():
        raise ConfigError(field, f"{value!r} is not an integer", f"an integer > {minimum:g}")
    if not math.isfinite(value) or (value < minimum if inclusive else value <= minimum):
        raise ConfigError(field, f"{value!r} is out of range", f"{kind} {'>=' if inclusive else '>'} {minimum:g}")
    return int(value) if integer else float(value)


@dataclass(frozen=True)
class Range:
    """A number above `minimum` (or at it, when `inclusive`) and, with `maximum`, under it (or at it, when
    `maximum_inclusive`)."""

    minimum: float = 0
    inclusive: bool = False
    maximum: float | None = None
    maximum_inclusive: bool = False
    integer: bool = False
    note: str = ""  # why the range is what it is, appended to the allowed values

    def allowed(self) -> str:
        kind = "an integer" if self.integer else "a number"
        if self.maximum is None:
            text = f"{kind} {'>=' if self.inclusive else '>'} {self.minimum:g}"
        else:
            text = (f"{kind}, {self.minimum:g} {'<=' if self.inclusive else '<'} x "
                    f"{'<=' if self.maximum_inclusive else '<'} {self.maximum:g}")
        return f"{text} {self.note}" if self.note else text

    def allows(self, value: Any) -> bool:
        try:
            self("", value)
        except ConfigError:
            return False
        return True

    def __call__(self, field: str, value: Any) -> None:
        try:
            number(field, value, integer=self.integer, minimum=self.minimum, inclusive=self.inclusive)
        except ConfigError as exc:  # the same problem, with the whole range as what is allowed
            raise ConfigError(field, exc.problem, self.allowed()) from None
        if self.maximum is not None and (value > self.maximum if self.maximum_inclusive else value >= self.maximum):
            raise ConfigError(field, f"{value!r} is out of range", self.allowed())


@dataclass(frozen=True)
class OneOf:
    """One of a few named values."""

    values: tuple[str, ...]

    def allowed(self) -> str:
        return ", ".join(self.values)

    def __call__(self, field: str, value: Any) -> None:
        choice(field, value, self.values)


POSITIVE = Range()
POSITIVE_INT = Range(integer=True)
NON_NEGATIVE = Range(inclusive=True)
NON_NEGATIVE_INT = Range(inclusive=True, integer=True)
Check = Range | OneOf


def setting(default: Any, help: str = "", check: Check | None = None) -> Any:
    """A dataclass field that declares a setting. A list or dict default is copied for each instance."""
    metadata = {"help": help, "check": check}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def required(help: str = "", check: Check | None = None) -> Any:
    """A dataclass field that declares a setting with no default (a model preset's sizes)."""
    return dataclasses.field(metadata={"help": help, "check": check})


def default_of(cls: type, name: str) -> Any:
    """The declared default of `cls.name`."""
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    return f.default_factory() if f.default_factory is not MISSING else f.default


def check_of(cls: type, name: str) -> Check | None:
    return {f.name: f for f in dataclasses.fields(cls)}[name].metadata.get("check")


# -- the structured config OmegaConf and Hydra check against -------------------------------------------------


def _optional_inner(hint: Any) -> Any:
    """T for Optional[T] (or T | None; T may be a union itself, e.g. Number), else None."""
    if typing.get_origin(hint) in (Union, types.UnionType) and type(None) in typing.get_args(hint):
        args = tuple(a for a in typing.get_args(hint) if a is not type(None))
        return args[0] if len(args) == 1 else Union[args]  # noqa: UP007
    return None


def _schema_type(hint: Any) -> Any:
    """The annotation OmegaConf gets: a declared dataclass becomes its schema, a tuple a list."""
    inner = _optional_inner(hint)
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


# -- what a setting accepts ------------------------------------------------------------------------------------


NOUNS = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


def _noun(hint: Any) -> str:
    hint = _optional_inner(hint) or hint
    if hint in NOUNS:
        return NOUNS[hint]
    if hint == Number:
        return "a number"
    origin = typing.get_origin(hint)
    if origin in (list, tuple):
        return "a list"
    if origin is dict or dataclasses.is_dataclass(hint):
        return "a mapping"
    return "a value"


def _kind(hint: Any) -> str:
    if hint is bool:
        return "true or false"
    if dataclasses.is_dataclass(hint):
        return "a mapping of " + ", ".join(f.name for f in dataclasses.fields(hint))
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (list, tuple):
        return "a list of integers, e.g. [1024, 2048]" if args[:1] == (int,) else "a list"
    return "" if hint is Any else _noun(hint)


def allowed(field: dataclasses.Field, hint: Any) -> str:
    """What `field` (annotated `hint`) accepts: its check's range or names, else its type; `or null` if optional."""
    inner = _optional_inner(hint)
    check = field.metadata.get("check")
    text = check.allowed() if check is not None else _kind(inner or hint)
    if check is not None and typing.get_origin(inner or hint) in (list, tuple):
        text = f"a list, each {text}"
    elif check is not None and hint is Any:  # a sweep: one value or a list of them (see as_list)
        text = f"{text}, or a list of them"
    return f"{text}, or null" if inner is not None and text else text


def describe(cls: type, name: str, element: bool = False) -> tuple[str, str]:
    """(noun, allowed) for setting `name` of the declared (or derived) dataclass `cls`; with `element`, for one
    element of that list setting."""
    hint = typing.get_type_hints(cls)[name]
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    if not element:
        return _noun(hint), allowed(f, hint)
    item = (typing.get_args(_optional_inner(hint) or hint) or (Any,))[0]
    check = f.metadata.get("check")
    return _noun(item), check.allowed() if check is not None else _kind(item)


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
    inner = _optional_inner(hint)
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
    hints = typing.get_type_hints(cls)
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
        raise ConfigError(prefix, f"{data!r} is not a mapping", _kind(cls))
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        section = _optional_inner(hints[f.name]) or hints[f.name]
        if dataclasses.is_dataclass(section) and data.get(f.name) is not None:
            _check_sections(_join(prefix, f.name), section, data[f.name])


@functools.cache
def _structured(cls: type) -> Any:
    """OmegaConf's node for `cls`'s schema, built once (OmegaConf.merge copies it before merging into it)."""
    from omegaconf import OmegaConf

    return OmegaConf.structured(schema_of(cls))


def parse_section(prefix: str, cls: type[T], data: Any) -> T:
    """`data` (a mapping; missing settings take their declared defaults) as the declared dataclass `cls`.
    Unknown keys, wrong types and values out of range raise a ConfigError naming `prefix.key`."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if data is None:
        data = {}
    _check_sections(prefix, cls, data)
    try:
        merged = OmegaConf.merge(_structured(cls), dict(data))  # a copy of the cached schema, data merged in
        values = OmegaConf.to_container(merged, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as exc:
        raise translate(exc, prefix) from None
    return build(prefix, cls, values)


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


# -- checks spec code applies itself (settings whose shape a type cannot say: a value or a list of them) --------


def boolean(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(field, f"{value!r} is not a boolean", "true or false")
    return value


def choice(field: str, value: Any, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise ConfigError(field, f"unknown value {value!r}", ", ".join(allowed))
    return str(value)


def as_list(value: Any) -> list[Any]:
    """A setting that takes one value or a list of them (a sweep), as a list."""
    return list(value) if isinstance(value, (list, tuple)) else [value]
