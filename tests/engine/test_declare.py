"""A setting's one declaration: the structured config derived from it, and the one-paragraph errors for what
OmegaConf refuses (a type, an unknown key, a missing value) and what the declared range refuses."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from omegaconf import OmegaConf

from xmfu.harness.engine.declare import POSITIVE_INT, ConfigError, Number, OneOf, Range, required, setting
from xmfu.harness.engine.structured import parse_section, schema_of


@dataclasses.dataclass(frozen=True)
class Inner:
    rate: float = setting(20.0, "per second", Range())


@dataclasses.dataclass(frozen=True)
class Example:
    size: int = required("a size", POSITIVE_INT)
    kind: str = setting("a", "which", OneOf(("a", "b")))
    sizes: tuple[int, ...] = setting((1, 2), "a sweep", POSITIVE_INT)
    limit: int | None = setting(None, "optional", POSITIVE_INT)
    timeout: Number = setting(5, "int or float", Range())
    fraction: float = setting(0.5, "0..1", Range(maximum=1))
    sweep: Any = setting((8,), "one or a list", POSITIVE_INT)
    inner: Inner = setting(Inner(), "a section")


def test_the_schema_is_a_mutable_twin_with_the_same_defaults():
    schema = schema_of(Example)
    assert not schema.__dataclass_params__.frozen
    cfg = OmegaConf.structured(schema)
    assert OmegaConf.to_container(cfg) == {"size": "???", "kind": "a", "sizes": [1, 2], "limit": None, "timeout": 5,
                                           "fraction": 0.5, "sweep": [8], "inner": {"rate": 20.0}}
    assert OmegaConf.merge(cfg, {"inner": {"rate": 5}}).inner.rate == 5.0  # a nested section takes a merge


def test_parse_section_builds_the_frozen_declaration():
    got = parse_section("x", Example, {"size": 3, "sizes": [4], "timeout": 2.5, "inner": {"rate": 1}})
    assert got == Example(size=3, sizes=(4,), timeout=2.5, sweep=[8], inner=Inner(rate=1.0))
    assert isinstance(got.sizes, tuple)  # a declared tuple is one again; an Any setting keeps OmegaConf's list
    assert parse_section("x", Example, {"size": 3}).timeout == 5  # a Number keeps an int an int


@pytest.mark.parametrize(("data", "message"), [
    ({"size": 1.5}, "x.size: 1.5 is not an integer. Allowed: an integer > 0"),
    ({"size": 0}, "x.size: 0 is out of range. Allowed: an integer > 0"),
    ({}, "x.size: is missing. Allowed: an integer > 0"),
    ({"size": 1, "colour": 1}, "x.colour: unknown setting. Allowed: size, kind, sizes, limit, timeout, fraction, "
                               "sweep, inner"),
    ({"size": 1, "kind": "c"}, "x.kind: unknown value 'c'. Allowed: a, b"),
    ({"size": 1, "sizes": [1, "x"]}, "x.sizes[1]: 'x' is not an integer. Allowed: an integer > 0"),
    ({"size": 1, "sizes": [1, -1]}, "x.sizes[1]: -1 is out of range. Allowed: an integer > 0"),
    ({"size": 1, "sizes": 3}, "x.sizes: 3 is not a list. Allowed: a list, each an integer > 0"),
    ({"size": 1, "limit": "no"}, "x.limit: 'no' is not an integer. Allowed: an integer > 0, or null"),
    ({"size": 1, "timeout": True}, "x.timeout: True is not a number. Allowed: a number > 0"),
    ({"size": 1, "fraction": 1.0}, "x.fraction: 1.0 is out of range. Allowed: a number, 0 < x < 1"),
    ({"size": 1, "sweep": [8, 0]}, "x.sweep[1]: 0 is out of range. Allowed: an integer > 0"),
    ({"size": 1, "inner": {"rate": "fast"}}, "x.inner.rate: 'fast' is not a number. Allowed: a number > 0"),
    ({"size": 1, "inner": 5}, "x.inner: 5 is not a mapping. Allowed: a mapping of rate"),
])
def test_bad_values_are_one_line_naming_the_field_and_what_is_allowed(data, message):
    with pytest.raises(ConfigError) as err:
        parse_section("x", Example, data)
    assert str(err.value) == message


def test_a_section_that_is_not_a_mapping():
    with pytest.raises(ConfigError, match=r"^timing: \[1\] is not a mapping. Allowed: a mapping of rate"):
        parse_section("timing", Inner, [1])


@pytest.mark.parametrize("module", ["pickle", "cloudpickle"])
def test_a_schema_pickles_as_a_reference_to_itself(module):
    """Hydra's submitit launcher pickles the composed config (cloudpickle); reading back a copy of a schema class
    in the launching process broke its dataclass fields (cloudpickle 2.1), and every later check with them."""
    from xmfu.harness.engine.settings import TimingConfig

    pickler = pytest.importorskip(module)
    schema = schema_of(TimingConfig)
    cfg = OmegaConf.structured(schema)
    back = pickler.loads(pickler.dumps(cfg))
    assert back._metadata.object_type is schema and pickler.loads(pickler.dumps(schema)) is schema
    assert [f.name for f in dataclasses.fields(schema)][:2] == ["warmup_s", "warmup_min_iters"]
