"""Settings declared once: a setting is a field of a frozen dataclass, made with `setting(default, help, check)`.
Its type is the annotation; its default, its line of help and the range its type cannot express (`Range`, `OneOf`)
live in the field. `allowed(field)` says what a setting accepts, for the errors and for `xmfu run --help`;
`xmfu.harness.engine.structured` derives the structured configs OmegaConf and Hydra check values against, and
validates a mapping against a declaration. A bad value is a `ConfigError` naming the dotted field and what is
allowed; the CLI prints it as one paragraph. This module imports nothing of ours.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import types
import typing
from collections.abc import Sequence
from dataclasses import MISSING, dataclass
from typing import Any, Union

Number = int | float  # OmegaConf keeps an int an int here (a `float` field makes 2 into 2.0, and a comparability key)


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


def optional_inner(hint: Any) -> Any:
    """T for Optional[T] (or T | None; T may be a union itself, e.g. Number), else None."""
    if typing.get_origin(hint) in (Union, types.UnionType) and type(None) in typing.get_args(hint):
        args = tuple(a for a in typing.get_args(hint) if a is not type(None))
        return args[0] if len(args) == 1 else Union[args]  # noqa: UP007
    return None



# -- what a setting accepts ------------------------------------------------------------------------------------


NOUNS = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


def _noun(hint: Any) -> str:
    hint = optional_inner(hint) or hint
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


def kind(hint: Any) -> str:
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
    inner = optional_inner(hint)
    check = field.metadata.get("check")
    text = check.allowed() if check is not None else kind(inner or hint)
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
    item = (typing.get_args(optional_inner(hint) or hint) or (Any,))[0]
    check = f.metadata.get("check")
    return _noun(item), check.allowed() if check is not None else kind(item)


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
