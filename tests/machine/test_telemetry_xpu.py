"""Intel GPU telemetry through `xpu-smi dump` and `xpu-smi discovery -j` (issue 29 item 4), on the outputs Intel
recorded in intel/xpumanager (tests/machine/xpu_smi_recorded/README.md names each file's source), and a stand-in
`xpu-smi` that prints them, so the subprocess, its bounds and its killing are real."""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
import time
from pathlib import Path

import pytest

from xmfu.harness.machine.platform import DeviceInfo, Platform
from xmfu.harness.machine.telemetry import open_sampler
from xmfu.harness.machine.telemetry.xpu_smi import (
    METRICS,
    XpuSmiSampler,
    parse_discovery,
    parse_dump,
    throttle_reasons,
)
from xmfu.harness.suites import doctor

RECORDED = Path(__file__).parent / "xpu_smi_recorded"
MAX1550 = DeviceInfo(kind="xpu", name="Intel(R) Data Center GPU Max 1550", vendor="intel", torch_device_type="xpu")
# `xpu-smi discovery -d 0 -j` detail: the keys cli/src/comlet_discovery.cpp (v1.3.7) prints, with the values of the
# `xpumcli discovery -d 0` table Intel recorded in README.md (v1.3.7). No recorded JSON of it exists.
DETAIL = {"device_id": 0, "device_type": "GPU", "device_name": "Intel(R) Graphics [0x56c0]",
          "vendor_name": "Intel(R) Corporation", "uuid": "01000000-0000-0000-0000-0000004d0000",
          "serial_number": "LQAC20305316", "core_clock_rate_mhz": "2050", "device_stepping": "C0",
          "driver_version": "", "kernel_version": "5.15.47+prerelease3762", "gfx_firmware_name": "GFX",
          "gfx_firmware_version": "DG02_1.3170", "gfx_data_firmware_name": "GFX_DATA",
          "gfx_data_firmware_version": "0x12d", "pci_bdf_address": "0000:4d:00.0"}


def _recorded(name: str) -> str:
    return (RECORDED / name).read_bytes().decode()  # bytes: the README's CRLF line ends stay as recorded


def test_recorded_dumps_parse_by_column_name_across_versions():
    """1.3.7's README (with temperature, CRLF), its guide, and 1.2.37's guide (older utilisation header)."""
    loaded = parse_dump(_recorded("dump_readme_v1.3.7.csv"))
    assert loaded.malformed == 0 and len(loaded.rows) == 4
    first, last = loaded.rows[0], loaded.latest
    assert (first["power_w"], first["sm_clock_mhz"], first["temp_c"], first["utilization_pct"]) == (
        119.61, 1800.0, 49.0, 99.55)
    assert (last["power_w"], last["sm_clock_mhz"], last["temp_c"]) == (119.24, 1700.0, 51.0)
    assert "energy_j" not in first and first["columns"]["temp_c"] == "GPU Core Temperature (Celsius Degree)"
    for name in ("dump_guide_v1.3.7.csv", "dump_guide_v1.2.37.csv"):
        idle = parse_dump(_recorded(name))
        assert idle.malformed == 0 and len(idle.rows) == 5
        assert idle.rows[1]["power_w"] == 14.59 and idle.rows[1]["utilization_pct"] == 0.0
        assert idle.rows[1]["sm_clock_mhz"] == 0.0 and idle.rows[1]["tool_time"] == "06:14:47.000"


HEADER_1X = ("Timestamp, DeviceId, Average % utilization of all GPU Engines, GPU Power (W), GPU Frequency (MHz), "
             "GPU Core Temperature (Celsius Degree), GPU Memory Utilization (%), GPU Energy Consumed (J), "
             "GPU Memory Used (MiB), Throttle reason")
HEADER_2X = ("Timestamp, DeviceId, utilization.gpu (%), power.draw (W), clocks.current.graphics (MHz), "
             "temperature.gpu (C), utilization.memory (%), energy.consumed (J), memory.used (MiB), "
             "clocks.throttle.reason")


def test_energy_memory_and_throttle_columns_as_xpu_smi_prints_them():
    """No recorded dump has these columns: the lines follow the printing source (1.x comlet_dump.cpp: four-wide
    padding, two decimals, N/A, reasons joined by ' | '; 2.x metrics/*.cpp: '<name> (<unit>)', reasons by ',')."""
    one = parse_dump(f"{HEADER_1X}\n21:23:00.000,    0, 99.55, 119.61, 1800, 49.00,  N/A, 1234.50, 2048.00, "
                     "Average Power Excursion | Thermal Excursion\n"
                     f"21:23:01.000,    0, 99.45, 119.36, 1800, 50.00, 3.00, 1353.86, 2048.00, Not Throttled\n")
    a, b = one.rows
    assert a["memory_utilization_pct"] is None and a["throttle"] == ["ave_pwr_cap", "thermal_limit"]
    assert a["memory_used_bytes"] == 2048 * 2**20 and b["throttle"] == []
    assert b["energy_j"] - a["energy_j"] == pytest.approx(119.36, abs=0.01)  # a cumulative counter, in J
    two = parse_dump(f"{HEADER_2X}\n21:23:00, 0, 99.5, 119.6, 1800, 49, 3, 1234.5, 2048, Thermal,Power\n"
                     "21:23:01, 0, 99.4, 119.3, 1800, 50, 3, N/A, 2048, None\n")
    assert two.malformed == 0 and two.rows[0]["throttle"] == ["thermal_limit", "ave_pwr_cap"]
    assert two.rows[1]["energy_j"] is None and two.rows[1]["throttle"] == []
    assert throttle_reasons("Made Up") == ["unknown: Made Up"]


def test_malformed_and_cut_off_lines_are_skipped_and_counted():
    lines = _recorded("dump_readme_v1.3.7.csv").splitlines(keepends=True)
    stream = [lines[0], lines[1], "21:23:00.500,    0, 99.55, 1x9.61, 1800, 49.00\n", "garbage\n", lines[2],
              "21:23:02.000,    0, 99.48\n", lines[3][:20]]
    parsed = parse_dump("".join(stream))
    assert parsed.malformed == 4 and [r["tool_time"] for r in parsed.rows] == ["21:23:00.000", "21:23:01.000"]
    before = parse_dump("Error: Level Zero Initialization Error\n")  # statistics_stub.cpp's message, printed as-is
    assert before.latest is None and before.malformed == 0
    assert list(before.messages) == ["Error: Level Zero Initialization Error"]


def test_discovery_gives_the_name_address_driver_and_firmware():
    listed = parse_discovery(_recorded("discovery_list_v1.3.7.json"))
    assert listed["device_name"] == "Intel(R) Graphics [0x020a]" and listed["pci_bdf_address"] == "0000:4d:00.0"
    assert listed["driver_version"] is None  # the list has no driver: the detail (-d) does
    detail = parse_discovery(json.dumps(DETAIL))
    assert detail["gfx_firmware_version"] == "DG02_1.3170" and detail["kernel_version"] == "5.15.47+prerelease3762"


def _stand_in(tmp_path: Path, dump: str, then: str = "time.sleep(30)") -> Path:
    """An executable `xpu-smi` that logs its argv, answers `discovery` with DETAIL and `dump` with `dump`."""
    (tmp_path / "dump.txt").write_bytes(dump.encode())
    (tmp_path / "detail.json").write_text(json.dumps(DETAIL))
    script = tmp_path / "xpu-smi"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(f"""\
        import sys, time
        with open({str(tmp_path / 'argv.log')!r}, 'a') as log:
            log.write(' '.join(sys.argv[1:]) + '\\n')
        if sys.argv[1] == 'discovery':
            print(open({str(tmp_path / 'detail.json')!r}).read())
            sys.exit(0)
        sys.stdout.write(open({str(tmp_path / 'dump.txt')!r}, newline='').read())
        sys.stdout.flush()
        {then}
        """))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_sampler_follows_the_stream_reports_what_it_cannot_read_and_kills_the_tool_on_close(tmp_path):
    script = _stand_in(tmp_path, _recorded("dump_readme_v1.3.7.csv"))
    sampler = XpuSmiSampler(MAX1550, command=(str(script),))
    try:
        assert sampler.wait_for_row(2.0)
        deadline = time.monotonic() + 2.0
        while len(sampler.parser.rows) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        reading = sampler.read()
        assert (reading.power_w, reading.sm_clock_mhz, reading.temp_c) == (119.24, 1700.0, 51.0)
        assert reading.energy_j is None and reading.power_source == "xpu-smi dump: GPU Power (W)"
        probe = sampler.probe()
        assert probe["mem_clock_mhz"]["reason"] == "xpu-smi dump has no memory-clock metric"
        assert "not among this xpu-smi's dump columns" in probe["throttle"]["reason"]
        assert probe["identity"]["value"]["gfx_firmware_version"] == "DG02_1.3170"
        assert "ordinal may be another card" in sampler.reason and "energy_j" in sampler.reason
        assert sampler.static()["counters"]["utilization_pct"] == 99.65
    finally:
        sampler.close()
    assert sampler._proc.poll() is not None  # the tool, which streams for ever, was ended by close()
    argv = (tmp_path / "argv.log").read_text().splitlines()
    assert f"dump -d 0 -m {METRICS} -i 1" in argv and "discovery -d 0 -j" in argv


def test_a_pci_address_is_what_xpu_smi_is_asked_for(tmp_path):
    script = _stand_in(tmp_path, _recorded("dump_guide_v1.3.7.csv"))
    card = DeviceInfo(kind="xpu", name="Max 1550", vendor="intel", index=3, pci_bus_id="0000:4D:00.0")
    sampler = XpuSmiSampler(card, command=(str(script),))
    sampler.close()
    assert sampler.identity == {"resolved_by": "pci_bus_id", "id": "0000:4d:00.0", "warning": None}
    assert f"dump -d 0000:4d:00.0 -m {METRICS} -i 1" in (tmp_path / "argv.log").read_text()


def test_a_tool_that_exits_with_an_error_or_never_gives_a_row_is_unavailable_in_bounded_time(tmp_path):
    script = _stand_in(tmp_path, "Error: Level Zero Initialization Error\n", then="sys.exit(1)")
    with pytest.raises(RuntimeError, match=r"exited with status 1 .*Level Zero Initialization Error"):
        XpuSmiSampler(MAX1550, command=(str(script),))
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    script = _stand_in(quiet, HEADER_1X + "\n")
    with pytest.raises(RuntimeError, match=r"no xpu-smi dump row within 0\.3 s"):  # the bound, not the tool, ended it
        XpuSmiSampler(MAX1550, command=(str(script),), first_row_timeout_s=0.3)


def _xpu_platform() -> Platform:
    return Platform(kind="xpu", devices=(MAX1550,), reason="test")


def test_no_xpu_smi_on_the_path_is_recorded_not_raised(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    sampler = open_sampler(_xpu_platform())
    assert not sampler.available and "FileNotFoundError" in sampler.reason and "xpu-smi" in sampler.reason


def test_doctor_reports_xpu_smi_as_the_intel_gpu_telemetry_source(tmp_path, monkeypatch):
    _stand_in(tmp_path, _recorded("dump_readme_v1.3.7.csv"))
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    found = doctor.Findings()
    doctor.check_telemetry(_xpu_platform(), found)
    tel = found.facts["telemetry"]
    assert tel["sampler"] == "xpu-smi" and tel["available"]
    assert tel["fields"]["power_w"]["source"] == "xpu-smi dump: GPU Power (W)"
    assert tel["fields"]["identity"]["value"]["kernel_version"] == "5.15.47+prerelease3762"
    assert not any(p.startswith("telemetry:") for p in found.problems)
