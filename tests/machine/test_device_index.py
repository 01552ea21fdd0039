"""`device_index`: a run measures a chosen local device instead of its local rank's (the suites' per-device
outliers use it); a device that is not there is one paragraph, exit status 2."""

from __future__ import annotations

import pytest

from tests.conftest import gpu_device, run_config
from xmfu.harness.engine.declare import ConfigError
from xmfu.harness.machine.platform import Platform
from xmfu.harness.run import SetupError, _chosen_device


def _node(n=4):
    return Platform("cuda", tuple(gpu_device("NVIDIA H100", index=i, uuid=f"u{i}") for i in range(n)), "test")


def test_the_chosen_device_wins_over_the_local_rank(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "3")
    plat = _node()
    assert plat.device.index == 3 and plat.choose(1).device.uuid == "u1"
    with pytest.raises(IndexError):
        plat.choose(4)


def test_a_device_that_is_not_there_is_a_setup_error():
    assert _chosen_device(_node(), None).chosen is None and _chosen_device(_node(), 2).device.index == 2
    with pytest.raises(SetupError, match=r"device_index: 4 is out of range: this process sees 4 cuda device\(s\)"):
        _chosen_device(_node(), 4)


@pytest.mark.parametrize("value", [-1, 1.5, "first", True])
def test_device_index_is_a_non_negative_integer(value):
    assert run_config(device_index=2).device_index == 2 and run_config().device_index is None
    with pytest.raises(ConfigError) as err:
        run_config(device_index=value)
    assert err.value.field == "device_index"


@pytest.mark.parametrize("name", ["price", "store"])
def test_suite_settings_outside_a_suite_are_refused(name):
    with pytest.raises(ConfigError, match="applies to suite runs only") as err:
        run_config(**{name: 3.0})
    assert err.value.field == name


def test_jax_measures_the_chosen_local_device_or_says_it_cannot():
    pytest.importorskip("jax")
    import jax

    from xmfu.harness.machine.frameworks import local_jax_device

    assert local_jax_device(0) == jax.local_devices()[0] == local_jax_device()
    with pytest.raises(RuntimeError, match="device_index 7: JAX sees 1 local device"):
        local_jax_device(7)
