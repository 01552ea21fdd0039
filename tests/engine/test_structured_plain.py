"""parse_section's plain path (engine/structured.py `plain_values`, issue 42 item 5): data that is plain and already
typed is merged with the schema's defaults without OmegaConf, and gives what OmegaConf gives, value for value and
type for type; anything else (a conversion, an interpolation, a merge, an error) still goes through OmegaConf, so
every error reads as it did. Checked on every composed config the repository ships and on seeded mutations of
every declared settings section, each parsed both ways."""

from __future__ import annotations

import dataclasses
import random
import typing
from typing import Any

import pytest

from xmfu.harness.engine import structured
from xmfu.harness.engine.declare import optional_inner
from xmfu.harness.engine.structured import NotPlain, parse_section, plain_values


def _omegaconf_only(*_: Any) -> dict[str, Any]:
    raise NotPlain


def _outcome(call) -> tuple[str, str]:
    try:
        return "value", repr(call())  # repr keeps 1, 1.0, True, '1', -0.0, a tuple and a list apart
    except Exception as exc:  # the error's type and words, compared
        return type(exc).__name__, str(exc)


def _both(monkeypatch, call) -> tuple[tuple[str, str], tuple[str, str]]:
    plain = _outcome(call)
    with monkeypatch.context() as m:
        m.setattr(structured, "plain_values", _omegaconf_only)
        return plain, _outcome(call)


def _sections() -> dict[type, str]:
    """Every declared settings dataclass a config reaches (the run's, each workload's, a suite's, the nested
    sections), with the prefix its errors carry."""
    from xmfu.harness.config.run_settings import RunSettings
    from xmfu.harness.config.suite_spec import SuiteSettings
    from xmfu.workloads.attention.spec import AttentionSettings
    from xmfu.workloads.collectives.spec import CollectivesSettings, SizeSweep
    from xmfu.workloads.inference.spec import InferenceSettings
    from xmfu.workloads.matmul.spec import MatmulSettings
    from xmfu.workloads.transformer.spec import ModelSpec, TransformerSettings

    out = {RunSettings: "", SuiteSettings: "suite", MatmulSettings: "workload", CollectivesSettings: "workload",
           SizeSweep: "workload.sweep", AttentionSettings: "workload", InferenceSettings: "workload",
           TransformerSettings: "workload", ModelSpec: "model"}
    for cls, prefix in list(out.items()):
        for name, hint in typing.get_type_hints(cls).items():
            inner = optional_inner(hint) or hint
            if dataclasses.is_dataclass(inner):
                out.setdefault(inner, f"{prefix}.{name}".lstrip("."))
    return out


# Each composes with Hydra and plans twice (seconds apiece): four in make test, the rest in the slow group.
COMPOSED = [["workload=matmul", "workload.sizes=[16,32]", "dtype=fp32"], ["workload=transformer"],
            ["experiment=smoke"],
            ["workload=matmul", "backends=[torch,jax]", "baseline=torch", "timing=quick", "repeats=3"],
            *(pytest.param(job, marks=pytest.mark.trials) for job in (
                ["workload=matmul"], ["workload=collectives"], ["workload=allreduce"], ["workload=attention"],
                ["workload=inference"], ["workload=membw"], ["workload=transformer", "model=8b"],
                ["experiment=mamf"], ["experiment=attention-shootout"], ["timing=sustained"]))]


@pytest.mark.parametrize("job", COMPOSED, ids=lambda job: " ".join(job))
def test_a_composed_config_parses_and_plans_as_omegaconf_reads_it(monkeypatch, job):
    """What `xmfu run` and the validator parse (the composed config as plain data) takes the plain path, and its
    RunConfig and planned cases are OmegaConf's."""
    from xmfu.harness.cli.formulas import _registry
    from xmfu.harness.config.hydra_app import compose_job
    from xmfu.harness.config.run_settings import parse_run_config
    from xmfu.harness.run import plan_phases

    registry = _registry()
    data, _ = compose_job(job)

    def planned() -> Any:
        cfg = parse_run_config(data, registry.backends_by_workload())
        return cfg, [(p.name, p.cases) for p in plan_phases(cfg, registry)]

    taken: list[int] = []
    real = structured.plain_values
    monkeypatch.setattr(structured, "plain_values", lambda *a: taken.append(1) or real(*a))
    plain, omegaconf = _both(monkeypatch, planned)
    assert plain == omegaconf and plain[0] == "value"
    assert taken  # the plain path was taken (its answers: the same)


POOL: list[Any] = [0, 1, 7, -3, 2**40, 2.5, 2.0, -0.0, 1e-3, float("inf"), True, False, None, "", "a", "fp32", "3",
                   "true", "${x}", "a$b", "???", "torch", "matmul", [], [1, 2], [16, 32, 64], [1.5], ["a", "b"],
                   ["torch", "jax"], [None], [[96, 72, 64]], [1, "x"], {}, {"a": 1}, {"name": "matmul"},
                   {"x": [1, {"y": "z"}]}, {1: "a"}, {"$k": 1}, (1, 2), b"x", {"name": "matmul", "sizes": [16]}]


def _mutated(cls: type, rng: random.Random, depth: int = 0) -> dict[str, Any]:
    """A mapping for `cls`: a few of its settings (now and then an unknown one) given pool values, or for a
    nested section a mapping of its own."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    out: dict[str, Any] = {}
    for _ in range(rng.randint(0, 4)):
        name = rng.choice([*names, "colour"]) if rng.random() < 0.95 else rng.choice(names)
        inner = optional_inner(hints.get(name)) or hints.get(name)
        if dataclasses.is_dataclass(inner) and depth < 2 and rng.random() < 0.7:
            out[name] = _mutated(inner, rng, depth + 1)
        else:
            out[name] = rng.choice(POOL)
    return out


def _trials(monkeypatch, count: int, seed: int) -> None:
    rng = random.Random(seed)
    plain_taken = 0
    for cls, prefix in _sections().items():
        for _ in range(count):
            data = _mutated(cls, rng)
            plain, omegaconf = _both(monkeypatch, lambda d=data, c=cls, p=prefix: parse_section(p, c, d))
            assert plain == omegaconf, (cls.__name__, data)
            try:
                plain_values(cls, data, structured._defaults(cls))
                plain_taken += 1
            except NotPlain:
                pass
    assert plain_taken > count  # the comparison covers the plain path, not only its fallback


def test_mutated_sections_parse_as_omegaconf_parses_them(monkeypatch):
    """Each settings section, given seeded mutations (types exact and not, interpolations, MISSING, unknown keys,
    nested sections in part): the same value, or the same error word for word, with and without the plain path."""
    _trials(monkeypatch, 20, 42)


@pytest.mark.trials  # hundreds of OmegaConf parses: in the slow group (make test-slow)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_many_mutated_sections_parse_as_omegaconf_parses_them(monkeypatch, seed):
    _trials(monkeypatch, 300, seed)


def test_what_the_plain_path_leaves_to_omegaconf():
    """A value OmegaConf converts or refuses, a merge, an interpolation or MISSING: NotPlain, for OmegaConf."""
    from xmfu.harness.config.run_settings import RunSettings
    from xmfu.workloads.matmul.spec import MatmulSettings

    defaults = structured._defaults(RunSettings)
    for data in ({"seed": 1.0}, {"seed": True}, {"dtype": 3}, {"run_id": "${now:}"}, {"dtype": "???"},
                 {"colour": 1}, {"timing": {"colour": 1}}, {"timing": 5}, {1: 2}):
        with pytest.raises(NotPlain):
            plain_values(RunSettings, data, defaults)
    with pytest.raises(NotPlain):  # an Any setting's list default given a mapping: OmegaConf refuses it
        plain_values(MatmulSettings, {"shapes": {"a": 1}}, structured._defaults(MatmulSettings))
    got = plain_values(RunSettings, {"seed": 3, "timing": {"max_time_s": 0.5}}, defaults)
    assert got["seed"] == 3 and got["timing"] == {**defaults["timing"], "max_time_s": 0.5}


def test_the_plain_path_copies_what_it_hands_out():
    """A caller that changes what it was given changes neither the data nor the schema's remembered defaults."""
    from xmfu.harness.config.run_settings import RunSettings

    data = {"workload": {"name": "matmul", "sizes": [16]}}
    first = parse_section("", RunSettings, data)
    first.workload["sizes"].append(99)
    assert data["workload"]["sizes"] == [16]
    assert parse_section("", RunSettings, data).workload == {"name": "matmul", "sizes": [16]}
