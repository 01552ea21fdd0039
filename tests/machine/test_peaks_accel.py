"""Trainium, Gaudi and Intel Max peaks (issue 29 item 3): the unit of "device" on Neuron is a logical NeuronCore,
per-core and per-chip figures that disagree are both recorded, and nothing unread is filled in."""

from __future__ import annotations

import pytest

from tests.conftest import gpu_device
from xmfu.harness.machine.neuron import lnc_degree
from xmfu.harness.machine.peaks import load_table, lookup, lookup_membw, match_device
from xmfu.harness.machine.platform import DeviceInfo


def _neuron(name: str, cores: int | None) -> DeviceInfo:
    return DeviceInfo(kind="neuron", name=name, vendor="aws", multiprocessors=cores)


@pytest.mark.parametrize(("name", "expected"), [
    ("Trainium", "aws-trainium1"), ("Trainium1", "aws-trainium1"), ("trn1.32xlarge", "aws-trainium1"),
    ("trn1n.32xlarge", "aws-trainium1"), ("Trainium2", "aws-trainium2"), ("Trainium 2", "aws-trainium2"),
    ("trn2.48xlarge", "aws-trainium2"), ("trn2u.48xlarge", "aws-trainium2"), ("Trainium3", "aws-trainium3"),
    ("trn3.48xlarge", "aws-trainium3"), ("GAUDI2", "intel-gaudi2"), ("HL-225", "intel-gaudi2"),
    ("GAUDI3", "intel-gaudi3"), ("HL-325L", "intel-gaudi3"),
    ("Intel(R) Data Center GPU Max 1550", "intel-max-1550"), ("Intel(R) Data Center GPU Max 1100", "intel-max-1100"),
])
def test_new_parts_match_by_the_names_they_report(name, expected):
    entry, why = match_device(DeviceInfo(kind="x", name=name, vendor="x"))
    assert entry is not None, why
    assert entry["id"] == expected


def test_trainium2_logical_core_uses_the_per_core_figure_times_lnc():
    """NeuronCore-v3 page: 79 BF16 TFLOPS per core; the chip page's 667 is not 8 x 79 = 632."""
    two = lookup(_neuron("Trainium2", 2), "bf16")
    assert two.tflops == 158 and two.entry == "aws-trainium2"
    assert "LNC=2" in two.note and "2 x 79" in two.note and "667" in two.note
    one = lookup(_neuron("Trainium2", 1), "bf16")
    assert one.tflops == 79 and "LNC=1" in one.note
    assert lookup(_neuron("Trainium2", 2), "fp8").tflops == 316
    assert "e5m2" in lookup(_neuron("Trainium2", 2), "fp8").note
    chip = lookup(_neuron("Trainium2", 8), "bf16")
    assert chip.tflops == 667 and "whole chip" in chip.note


def test_trainium_unknown_or_impossible_lnc_gets_no_peak():
    unknown = lookup(_neuron("Trainium2", None), "bf16")
    assert unknown.tflops is None and "LNC" in unknown.note
    trn2 = lookup(_neuron("Trainium2", 4), "bf16")  # neither LNC=1/2 nor the whole chip (8)
    assert trn2.tflops is None and "LNC=1, 2" in trn2.note and "withheld" in trn2.note
    assert lookup(_neuron("Trainium", 2), "bf16").tflops == 190  # trn1's two cores are the whole chip
    assert lookup(_neuron("Trainium", 1), "bf16").tflops == 95


def test_trainium_memory_bandwidth_only_for_the_whole_chip():
    assert lookup_membw(_neuron("Trainium2", 8)).gbps == pytest.approx(2900)
    core = lookup_membw(_neuron("Trainium2", 2))
    assert core.gbps is None and "not published" in core.note and "peak_membw_gbps=" in core.note
    assert lookup_membw(_neuron("Trainium3", 8)).gbps == pytest.approx(4900)


def test_trainium3_fp8_is_the_mxfp8_rate_and_e4m3fn_is_native():
    peak = lookup(_neuron("Trainium3", 1), "fp8")
    assert peak.tflops == 315 and "mxfp8" in peak.note
    assert load_table()["devices"][[e["id"] for e in load_table()["devices"]].index("aws-trainium3")][
        "fp8_formats"] == ["mxfp8", "e4m3fn"]


def test_trn1_and_trn2_fp8_formats_exclude_e4m3fn():
    """NCC_EVRF051: F8E4M3FN "is not supported on TRN1/TRN2"."""
    for entry in load_table()["devices"]:
        if entry["id"] in ("aws-trainium1", "aws-trainium2"):
            assert "e4m3fn" not in entry["fp8_formats"] and "e5m2" in entry["fp8_formats"]


def test_every_neuron_entry_records_where_per_core_and_chip_figures_disagree():
    """Consistency: per-core x cores equals the chip figure within 1%, or the per-core comment names the product
    and the chip figure (peaks.yaml records both, uses the per-core one)."""
    from xmfu.harness.machine.peaks import PEAKS_FILE

    raw = PEAKS_FILE.read_text()
    checked = []
    for entry in load_table()["devices"]:
        if "per_neuroncore" not in entry:
            continue
        assert set(entry["per_neuroncore"]["tflops"]) == set(entry["tflops"]), entry["id"]
        assert entry["per_neuroncore"]["source"], entry["id"]
        for dtype, per_core in entry["per_neuroncore"]["tflops"].items():
            chip = entry["tflops"][dtype]
            if per_core is None or chip is None:
                continue
            product = per_core * entry["neuroncores"]
            if abs(product / chip - 1) > 0.01:
                stated = f"{entry['neuroncores']} x {per_core:g} = {product:g} != {chip:g}"
                assert stated in raw, (entry["id"], dtype, stated)
        checked.append(entry["id"])
    assert checked == ["aws-trainium1", "aws-trainium2", "aws-trainium3"]


def test_gaudi_peaks_and_what_stays_absent():
    g3 = DeviceInfo(kind="hpu", name="GAUDI3", vendor="intel")
    assert lookup(g3, "bf16").tflops == 1835 and lookup(g3, "fp8").tflops == 1835
    assert lookup_membw(g3).gbps == pytest.approx(3670)
    g2 = DeviceInfo(kind="hpu", name="GAUDI2", vendor="intel")
    assert lookup(g2, "bf16").tflops == 432
    fp8 = lookup(g2, "fp8")  # no Intel page read gives Gaudi 2's fp8 figure: none, with the reason
    assert fp8.tflops is None and "no published dense fp8" in fp8.note


def test_intel_max_has_no_flops_figure_and_a_stack_gets_no_bandwidth():
    card = gpu_device("Intel(R) Data Center GPU Max 1550", 128, memory_gb=128, kind="xpu", vendor="intel")
    assert lookup(card, "bf16").tflops is None
    assert lookup_membw(card).gbps == pytest.approx(3276.8)
    stack = gpu_device("Intel(R) Data Center GPU Max 1550", 64, memory_gb=64, kind="xpu", vendor="intel")
    assert lookup_membw(stack).gbps is None and "64/128" in lookup_membw(stack).note


@pytest.mark.parametrize(("env", "instance", "expected"), [
    ({}, "trn2.48xlarge", 2), ({}, "trn1.32xlarge", 1), ({"NEURON_LOGICAL_NC_CONFIG": "1"}, "trn2.48xlarge", 1),
    ({}, "trn3.48xlarge", 2), ({"NEURON_LOGICAL_NC_CONFIG": "2"}, "trn1.32xlarge", None),
    ({"NEURON_LOGICAL_NC_CONFIG": "4"}, "trn2.48xlarge", None), ({}, None, None),
])
def test_lnc_degree_from_the_runtime_variable_or_the_family_default(env, instance, expected):
    degree, why = lnc_degree(env, instance)
    assert degree == expected and why


@pytest.mark.parametrize(("name", "fmt"), [("Trainium2", "e5m2"), ("Trainium1", "e5m2"), ("Trainium3", "e4m3fn")])
def test_a_trainium_device_takes_the_fp8_format_its_part_lists(name, fmt):
    from xmfu.harness.machine.peaks import device_fp8_format

    assert device_fp8_format(_neuron(name, 1)) == fmt


def test_devices_without_a_list_keep_the_platform_rule():
    from xmfu.harness.machine.peaks import device_fp8_format

    mi300x = DeviceInfo(kind="rocm", name="AMD Instinct MI300X", vendor="amd", arch="gfx942:sramecc+:xnack-",
                        multiprocessors=304, memory_bytes=192 * 2**30)
    assert device_fp8_format(mi300x) == "e4m3fnuz"
    assert device_fp8_format(DeviceInfo(kind="cuda", name="NVIDIA H100 80GB HBM3", vendor="nvidia")) == "e4m3fn"
