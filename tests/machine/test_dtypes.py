"""The fp8 variant each platform takes, and inputs rounded to it."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from xmfu.harness.machine.dtypes import fp8_format, fp8_max, storage, uniform_inputs


@pytest.mark.parametrize(("kind", "arch", "fmt"), [
    ("rocm", "gfx942:sramecc+:xnack-", "e4m3fnuz"),  # MI300X, MI300A, MI325X (CDNA3)
    ("rocm", "gfx940", "e4m3fnuz"), ("rocm", "gfx941", "e4m3fnuz"),
    ("rocm", "gfx950:sramecc+:xnack-", "e4m3fn"),  # MI350X/MI355X (CDNA4): OCP fp8
    ("rocm", "gfx1201", "e4m3fn"), ("cuda", None, "e4m3fn"), ("cuda", "", "e4m3fn"), ("cpu", "x86_64", "e4m3fn"),
])
def test_fp8_format_by_platform_and_arch(kind, arch, fmt):
    assert fp8_format(kind, arch) == fmt


def test_fp8_formats_ranges():
    assert fp8_max("e4m3fn") == 448.0 and fp8_max("e4m3fnuz") == 240.0


def test_fp8_inputs_are_rounded_to_the_format_used():
    fnuz = uniform_inputs(0, {"x": (4000,)}, "fp8", "e4m3fnuz")["x"]
    ocp = uniform_inputs(0, {"x": (4000,)}, "fp8", "e4m3fn")["x"]
    np.testing.assert_array_equal(fnuz.astype(ml_dtypes.float8_e4m3fnuz).astype(np.float32), fnuz)
    np.testing.assert_array_equal(ocp.astype(ml_dtypes.float8_e4m3fn).astype(np.float32), ocp)
    assert np.any(fnuz != ocp)  # fnuz has one more binade below 2^-6: small values round differently
    assert storage("fp8", "e4m3fnuz") is ml_dtypes.float8_e4m3fnuz and storage("bf16") is ml_dtypes.bfloat16


def test_fp8_without_a_format_is_refused_not_guessed():
    with pytest.raises(ValueError, match="fp8 needs a format"):
        uniform_inputs(0, {"x": (4,)}, "fp8")


@pytest.mark.parametrize(("formats", "fmt"), [
    (["e5m2", "e4m3"], "e5m2"),  # Trainium 1/2: e4m3fn refused, their e4m3 has no torch dtype
    (["mxfp8", "e4m3fn"], "e4m3fn"),  # Trainium 3: MXFP8 has block scales no plain tensor holds
    (["mxfp8"], None),  # nothing xmfu can make inputs in: None, never a guess
])
def test_a_parts_own_fp8_list_decides_its_format(formats, fmt):
    assert fp8_format("neuron", None, formats) == fmt


def test_e5m2_inputs_are_rounded_to_e5m2():
    x = uniform_inputs(0, {"x": (4000,)}, "fp8", "e5m2")["x"]
    np.testing.assert_array_equal(x.astype(ml_dtypes.float8_e5m2).astype(np.float32), x)
    assert fp8_max("e5m2") == 57344.0
