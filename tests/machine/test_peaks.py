"""Peak lookup: the tricky names, partitions, unknown devices, overrides and the CPU estimate."""

from __future__ import annotations

import pytest

from tests.conftest import gpu_device
from xmfu.harness.machine.peaks import cpu_peak, load_table, lookup, lookup_membw, match_device, peak_clock_mhz
from xmfu.harness.machine.platform import DeviceInfo

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


@pytest.mark.parametrize(("name", "sms", "expected"), [
    ("NVIDIA H100 80GB HBM3", 132, "nvidia-h100-sxm"),
    ("NVIDIA H100 PCIe", 114, "nvidia-h100-pcie"),
    ("NVIDIA H100 NVL", 132, "nvidia-h100-nvl"),
    ("NVIDIA H200", 132, "nvidia-h200-sxm"),
    ("NVIDIA H20", None, "nvidia-h20"),
    ("NVIDIA L40S", 142, "nvidia-l40s"),
    ("NVIDIA B200", None, "nvidia-b200"),
    ("NVIDIA GB200", None, "nvidia-gb200"),
    ("NVIDIA A100-SXM4-80GB", 108, "nvidia-a100-sxm4-80gb"),
    ("NVIDIA A100-SXM4-40GB", 108, "nvidia-a100-sxm4-40gb"),
    ("NVIDIA A100-PCIE-40GB", 108, "nvidia-a100-pcie-40gb"),
    ("NVIDIA A100 80GB PCIe", 108, "nvidia-a100-pcie-80gb"),
    ("AMD Instinct MI300X", 304, "amd-mi300x"),
    ("AMD Instinct MI300X VF", 304, "amd-mi300x"),
    ("AMD Instinct MI325X", 304, "amd-mi325x"),
    ("AMD Instinct MI355X", 256, "amd-mi355x"),
    ("AMD Instinct MI250X/MI250", 110, "amd-mi250x-gcd"),
    ("AMD Instinct MI250X/MI250", 104, "amd-mi250-gcd"),
])
def test_names_match_most_specific_entry(name, sms, expected):
    entry, why = match_device(gpu_device(name, sms))
    assert entry is not None, why
    assert entry["id"] == expected


@pytest.mark.parametrize("kind", ["TPU v4", "TPU v5 lite", "TPU v5", "TPU v6 lite", "TPU7x"])
def test_tpu_device_kinds(kind):
    device = DeviceInfo(kind="tpu", name=kind, vendor="google", jax_device_kind=kind)
    expected = {"TPU v4": "google-tpu-v4", "TPU v5 lite": "google-tpu-v5e", "TPU v5": "google-tpu-v5p",
                "TPU v6 lite": "google-tpu-v6e", "TPU7x": "google-tpu7x"}[kind]
    assert match_device(device)[0]["id"] == expected


# Names torch/NVML report for parts next to those in the table: none may borrow a neighbour's peak (H800 is not
# H100, GH200 not H200, H200 NVL not H200 SXM, L4/L40 not L40S, B100 not B200, MI308X not MI300X). Their own
# datasheet figures are not in the table: no peak, with the reason, until a sourced entry is added.
@pytest.mark.parametrize("name", ["NVIDIA H200 NVL", "NVIDIA L4", "NVIDIA L40", "NVIDIA GH200 480GB",
                                  "NVIDIA GH200 144G HBM3e", "NVIDIA H800", "NVIDIA H800 PCIe", "NVIDIA H800 NVL",
                                  "NVIDIA B100", "NVIDIA B300 SXM6 AC", "AMD Instinct MI308X", "TPU v4 lite",
                                  "Some New Accelerator"])
def test_devices_not_in_the_table_get_no_peak(name):
    peak = lookup(gpu_device(name), "bf16")
    assert peak.tflops is None
    assert "not in xmfu's peak table" in peak.note and "peak_tflops=" in peak.note


def test_a100_40gb_has_the_80gb_parts_flops_and_its_own_bandwidth():
    sxm = gpu_device("NVIDIA A100-SXM4-40GB", 108, memory_gb=40)
    assert lookup(sxm, "bf16").tflops == 312 and lookup(sxm, "fp32").clock_mhz == 1410
    assert lookup_membw(sxm).gbps == pytest.approx(1555.0)
    assert lookup_membw(gpu_device("NVIDIA A100-PCIE-40GB", 108, memory_gb=40)).gbps == pytest.approx(1555.0)


def test_tpu7x_peak_is_per_jax_device_half_a_chip():
    """jax/_src/tpu_info.py: 7x has two TensorCores per chip and no Megacore, one TensorCore per JAX device; its
    per-device bf16 figure is the chip's 2.31e15 halved. The table's chip figure is Google's 2307 TFLOP/s."""
    device = DeviceInfo(kind="tpu", name="TPU7x", vendor="google", jax_device_kind="TPU7x", multiprocessors=1)
    assert lookup(device, "bf16").tflops == pytest.approx(2307 / 2)
    assert lookup(device, "fp8").tflops == pytest.approx(4614 / 2)


def test_dense_figures_not_sparse():
    assert lookup(gpu_device("NVIDIA H100 80GB HBM3", 132), "bf16").tflops == 989
    assert lookup(gpu_device("NVIDIA H100 80GB HBM3", 132), "fp8").tflops == 1979


def test_mig_slice_scales_by_visible_sms():
    peak = lookup(gpu_device("NVIDIA H100 80GB HBM3", 66), "bf16")
    assert peak.tflops == pytest.approx(989 / 2)
    assert "66/132" in peak.note


def test_more_sms_than_the_part_withholds_the_peak():
    peak = lookup(gpu_device("NVIDIA H100 PCIe", 132), "bf16")
    assert peak.tflops is None and "114" in peak.note


def test_dtype_without_arithmetic_is_null_with_reason():
    peak = lookup(gpu_device("NVIDIA A100-SXM4-80GB", 108), "fp8")
    assert peak.tflops is None and "fp8" in peak.note


def test_rocm_blank_name_falls_back_to_arch_cus_and_memory():
    mi300x = gpu_device("", 304, memory_gb=206, kind="rocm", vendor="amd", arch="gfx942:sramecc+:xnack-")
    mi325x = gpu_device("", 304, memory_gb=274, kind="rocm", vendor="amd", arch="gfx942:sramecc+:xnack-")
    assert match_device(mi300x)[0]["id"] == "amd-mi300x"
    assert match_device(mi325x)[0]["id"] == "amd-mi325x"


def test_override_wins_and_names_itself():
    peak = lookup(gpu_device("Some New Accelerator"), "bf16", override=123.0)
    assert peak.tflops == 123.0 and "override" in peak.source


def test_every_entry_has_a_source_and_all_dtypes():
    for entry in load_table()["devices"]:
        assert entry["source"], entry["id"]
        assert set(entry["tflops"]) == set(DTYPES), entry["id"]
        assert entry["names"], entry["id"]


def _cpu(flags, cores=2, clock=2.5):
    return DeviceInfo(kind="cpu", name="cpu", vendor="x", multiprocessors=cores,
                      cpu={"flags": flags, "physical_cores": cores, "clock_ghz": clock, "clock_source": "test"})


def test_cpu_peak_from_cores_clock_and_isa():
    assert cpu_peak(_cpu(["avx2", "fma"]), "fp32").tflops == pytest.approx(2 * 2.5e9 * 32 / 1e12)
    assert cpu_peak(_cpu(["avx512f", "avx2", "fma"]), "fp32").tflops == pytest.approx(2 * 2.5e9 * 64 / 1e12)
    assert cpu_peak(_cpu(["avx512f", "avx512_bf16"]), "bf16").tflops == pytest.approx(2 * 2.5e9 * 128 / 1e12)
    assert cpu_peak(_cpu(["avx512f", "avx512_bf16", "amx_bf16"]), "bf16").tflops == pytest.approx(
        2 * 2.5e9 * 1024 / 1e12)
    peak = cpu_peak(_cpu(["avx2", "fma"]), "bf16")  # no bf16 instructions: the fp32 rate, said so
    assert peak.tflops == pytest.approx(2 * 2.5e9 * 32 / 1e12) and "no native bf16" in peak.note
    assert "2.500 GHz" in peak.note


def test_cpu_peak_has_no_tf32_or_fp8_and_honours_clock_override():
    assert cpu_peak(_cpu(["avx2", "fma"]), "tf32").tflops is None
    assert cpu_peak(_cpu(["avx2", "fma"]), "fp8").tflops is None
    assert cpu_peak(_cpu(["avx2", "fma"]), "fp32", clock_ghz=3.0).tflops == pytest.approx(2 * 3e9 * 32 / 1e12)
    assert cpu_peak(_cpu(["avx2", "fma"], clock=None), "fp32").tflops is None


# --- Hardware truth: ambiguous names, clocks that match the peaks, memory bandwidth ---------------------------


@pytest.mark.parametrize("cus", [96, None])
def test_ambiguous_mi250_name_without_a_deciding_cu_count_gets_no_peak(cus):
    # "AMD Instinct MI250X/MI250" names two parts; only 110 (MI250X) or 104 (MI250) CUs per GCD decide.
    device = gpu_device("AMD Instinct MI250X/MI250", cus, memory_gb=68.7, kind="rocm", vendor="amd",
                        arch="gfx90a:sramecc+:xnack-")
    entry, why = match_device(device)
    assert entry is None and "ambiguous" in why
    peak = lookup(device, "bf16")
    assert peak.tflops is None and peak.entry is None and "ambiguous" in peak.note and "peak_tflops=" in peak.note


def _decimals(value: float) -> int:
    text = repr(value)
    return len(text.split(".")[1]) if "." in text and not float(value).is_integer() else 0


def _entries_with_clock_facts():
    return [e for e in load_table()["devices"]
            if e.get("multiprocessors") and e.get("boost_clock_mhz") and e.get("flops_per_clock_per_unit")]


def test_every_peak_equals_units_times_flops_per_clock_times_its_clock():
    """peak = SMs/CUs x dense FLOP/clk/unit x the clock, within the rounding of the published figures: half a
    unit in the last digit of the peak, plus the effect of quoting the clock in whole MHz."""
    checked = []
    for entry in _entries_with_clock_facts():
        for dtype, per_clock in entry["flops_per_clock_per_unit"].items():
            clock_mhz = peak_clock_mhz(entry, dtype)
            published = entry["tflops"][dtype]
            derived = entry["multiprocessors"] * per_clock * clock_mhz * 1e6 / 1e12
            slack = 0.5 * 10 ** -_decimals(published) + derived * 0.5 / clock_mhz
            assert abs(derived - published) <= slack, (entry["id"], dtype, derived, published)
            checked.append(entry["id"])
    # every GPU whose unit count and architecture are published is covered, not a convenient few
    for must in ("nvidia-a100-sxm4-80gb", "nvidia-a100-sxm4-40gb", "nvidia-a100-pcie-40gb",
                 "nvidia-h100-sxm", "nvidia-h100-pcie", "nvidia-h200-sxm", "nvidia-l40s",
                 "amd-mi250x-gcd", "amd-mi250-gcd", "amd-mi300x", "amd-mi300a", "amd-mi325x", "amd-mi355x"):
        assert must in checked, must


@pytest.mark.parametrize(("name", "sms", "dtype", "clock"), [
    ("NVIDIA H100 80GB HBM3", 132, "bf16", 1830), ("NVIDIA H200", 132, "bf16", 1830),
    ("NVIDIA H100 PCIe", 114, "bf16", 1620), ("NVIDIA H100 80GB HBM3", 132, "fp8", 1830),
    ("NVIDIA H100 80GB HBM3", 132, "tf32", 1830),
    # Hopper's fp32 vector peak is at the max boost clock: 132 SMs x 256 FLOP/clk x 1980 MHz = the datasheet's 67
    ("NVIDIA H100 80GB HBM3", 132, "fp32", 1980), ("NVIDIA H200", 132, "fp32", 1980),
    ("NVIDIA H100 PCIe", 114, "fp32", 1755),
    ("NVIDIA A100-SXM4-80GB", 108, "fp32", 1410), ("NVIDIA A100-SXM4-80GB", 108, "bf16", 1410)])
def test_clock_adjusted_mfu_uses_the_clock_the_peak_was_computed_at(name, sms, dtype, clock):
    assert lookup(gpu_device(name, sms), dtype).clock_mhz == clock


def test_fp32_clock_adjusted_mfu_on_hopper_is_not_scaled_by_the_tensor_clock():
    """At the max boost clock the fp32 peak is reached: the clock-adjusted MFU equals the plain one."""
    from xmfu.harness.machine.telemetry.aggregate import efficiency

    peak = lookup(gpu_device("NVIDIA H100 80GB HBM3", 132), "fp32")
    out = efficiency({"mean_sm_clock_mhz": 1980.0, "mean_power_w": 500.0}, tflops=33.5, median_s=1e-3, mfu=0.5,
                     peak_clock_mhz=peak.clock_mhz)
    assert out["mfu_clock_adjusted"] == pytest.approx(0.5)


def test_b200_tf32_is_half_the_sparse_datasheet_figure():
    assert lookup(gpu_device("NVIDIA B200"), "tf32").tflops == 1100  # 2.2 PFLOPS with sparsity


def test_memory_bandwidth_of_a_known_device_in_gb_per_s():
    bw = lookup_membw(gpu_device("NVIDIA H100 80GB HBM3", 132))
    assert bw.gbps == pytest.approx(3350.0) and bw.entry == "nvidia-h100-sxm" and bw.source
    assert lookup_membw(gpu_device("AMD Instinct MI300X", 304, kind="rocm", vendor="amd")).gbps == pytest.approx(5300)
    assert set(bw.as_row()) == {"peak_membw_gbps", "peak_membw_source", "peak_membw_entry", "peak_membw_note"}


def test_memory_bandwidth_unknown_ambiguous_partition_cpu_and_override():
    unknown = lookup_membw(gpu_device("Some New Accelerator"))
    assert unknown.gbps is None and "not in xmfu's peak table" in unknown.note and "peak_membw_gbps=" in unknown.note
    ambiguous = lookup_membw(gpu_device("AMD Instinct MI250X/MI250", None, kind="rocm", vendor="amd"))
    assert ambiguous.gbps is None and "ambiguous" in ambiguous.note
    mig = lookup_membw(gpu_device("NVIDIA H100 80GB HBM3", 66))
    assert mig.gbps is None and "66/132" in mig.note
    cpu = lookup_membw(_cpu(["avx2", "fma"]))
    assert cpu.gbps is None and cpu.note == ("no published peak memory bandwidth for a CPU; "
                                            "pass peak_membw_gbps=")
    forced = lookup_membw(_cpu(["avx2", "fma"]), override=250.0)
    assert forced.gbps == 250.0 and forced.entry == "override" and "peak_membw_gbps=250" in forced.source


def test_a_longer_match_wins_only_over_matches_inside_it():
    table = {"devices": [{"id": "generic", "names": ["H100"]}, {"id": "nvl", "names": ["H100 NVL"]},
                         {"id": "other", "names": ["NVL"]}]}
    assert match_device(gpu_device("NVIDIA H100 NVL"), table)[0]["id"] == "nvl"  # "NVL" and "H100" lie inside
    two = {"devices": [{"id": "a", "names": ["H100"]}, {"id": "b", "names": ["H200"]}]}
    entry, why = match_device(gpu_device("NVIDIA H100/H200"), two)
    assert entry is None and "ambiguous between a, b" in why


def test_a_device_name_is_matched_against_the_table_once_per_process(monkeypatch):
    """`xmfu validate` looks up each row's device name: the patterns are searched once per name, not per row
    (issue 30 item 14)."""
    from xmfu.harness.machine import peaks

    peaks._by_name_in_table.cache_clear()
    searched = []
    real = peaks._span
    monkeypatch.setattr(peaks, "_span", lambda *a: searched.append(1) or real(*a))
    first = match_device(gpu_device("NVIDIA H100 80GB HBM3", 132))
    once = len(searched)
    assert match_device(gpu_device("NVIDIA H100 80GB HBM3", 132)) == first and len(searched) == once > 0


def test_every_tdp_in_the_table_is_positive_with_its_document_address_and_the_words_that_state_it():
    tdps = {e["id"]: e["tdp"] for e in load_table()["devices"] if "tdp" in e}
    assert set(tdps) == {"nvidia-h100-pcie", "nvidia-h200-sxm", "nvidia-b200", "nvidia-gb200", "amd-mi300x"}
    for entry_id, tdp in tdps.items():
        assert tdp["w"] > 0 and tdp["url"].startswith("https://"), entry_id
        assert f"{tdp['w']:g}" in tdp["read"] and tdp["source"].strip(), entry_id
    assert "tdp" not in load_table()["cpu"]  # no CPU TDP: no source was read for one


GOOD_TDP = {"w": 700, "source": "a datasheet", "url": "https://example.invalid/ds", "read": "Up to 700W (configurable)"}


@pytest.mark.parametrize(("change", "named"), [
    ({"w": 0}, "tdp.w is 0"),
    ({"w": -350}, "tdp.w is -350"),
    ({"w": "700 W"}, "tdp.w is '700 W'"),
    ({"source": ""}, "tdp.source is missing"),
    ({"url": None}, "tdp.url is missing"),
    ({"read": "Up to 600W (configurable)"}, "does not state 700 W"),
    ({"read": "Up to 7000W"}, "does not state 700 W"),
    ({"range_w": [700, 600]}, "tdp.range_w is [700, 600]"),
    ({"range_w": [300, 350]}, "tdp.range_w is [300, 350]"),  # the upper bound must be w
])
def test_the_loader_refuses_a_tdp_without_a_positive_figure_its_source_or_words_that_state_it(change, named):
    from xmfu.harness.machine.peaks import check_tdp

    with pytest.raises(ValueError, match=r"peaks\.yaml entry 'x': ") as err:
        check_tdp({"id": "x", "tdp": {**GOOD_TDP, **change}})
    assert named in str(err.value)
    check_tdp({"id": "x", "tdp": GOOD_TDP})  # the same block, whole, passes
    check_tdp({"id": "x", "tdp": {**GOOD_TDP, "range_w": [300, 700], "read": "300-700W (configurable)"}})


def test_a_table_file_with_a_bad_tdp_is_refused_on_load(tmp_path):
    bad = tmp_path / "peaks.yaml"
    bad.write_text("devices:\n  - id: p\n    names: ['P']\n    tdp: {w: 700, source: s, url: u, read: no figure}\n")
    with pytest.raises(ValueError, match="does not state 700 W"):
        load_table(bad)


def test_tdp_lookup_gives_the_sourced_figure_or_none_with_why():
    from xmfu.harness.machine.peaks import CPU_TDP_NOTE, lookup_tdp
    from xmfu.harness.machine.platform import cpu_device

    pcie = lookup_tdp(gpu_device("NVIDIA H100 PCIe", 114))
    assert pcie.w == 350.0 and pcie.note is None and "Product Brief PB-11133-001" in pcie.source
    assert lookup_tdp(gpu_device("AMD Instinct MI300X", 304, vendor="amd", kind="rocm")).w == 750.0
    sxm = lookup_tdp(gpu_device("NVIDIA H100 80GB HBM3", 132))  # no vendor text read for it: none, with why
    assert sxm.w is None and sxm.source is None and "no sourced TDP for nvidia-h100-sxm" in sxm.note
    assert lookup_tdp(gpu_device("NVIDIA H800", 132)).note.startswith("not stated: device 'NVIDIA H800' is not")
    cpu = lookup_tdp(cpu_device())
    assert cpu.w is None and cpu.note == CPU_TDP_NOTE


def test_xmfu_peaks_prints_the_tdp_where_the_table_has_one_and_a_dash_elsewhere(capsys):
    from xmfu.harness.cli.main import cmd_peaks

    assert cmd_peaks([]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[2:] if line[:1] != "C"}
    tdp_at = 7  # id, five dtypes, HBM, then TDP
    assert rows["nvidia-h100-pcie"][tdp_at] == "350" and rows["amd-mi300x"][tdp_at] == "750"
    assert rows["nvidia-h100-sxm"][tdp_at] == "-" and rows["nvidia-h100-nvl"][tdp_at] == "-"
    assert rows["nvidia-b200"][tdp_at] == "1000" and rows["nvidia-gb200"][tdp_at] == "1200"


def test_libyaml_reads_the_peak_table_as_the_pure_loader_does():
    """load_table reads xmfu's own peaks.yaml with libyaml's loader where PyYAML has one: the same data, value for
    value and type for type, as yaml.safe_load."""
    import yaml

    from xmfu.harness.machine import peaks

    text = peaks.PEAKS_FILE.read_text()
    pure = yaml.safe_load(text)
    assert repr(yaml.load(text, Loader=peaks._LOADER)) == repr(pure)  # repr keeps 1, 1.0 and True apart
    assert {k: v for k, v in peaks.load_table().items() if k != "sha256"} == pure
