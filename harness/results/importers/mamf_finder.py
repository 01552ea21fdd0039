"""mamf-finder logs (stas00/ml-engineering compute/accelerator/benchmarks/mamf-finder.py), parsed into one entry per
shape the log names, with the TFLOP/s it printed.

What the script prints, read at 744d01e (2025) and in its history:
- a header (`print_benchmark_header`): "** Command line:", "** Dtype: torch.bfloat16", "** Platform/Device info:" with
  the device's properties (torch's `_CudaDeviceProperties(name='...', ...)`), "** Critical software versions:"
  (torch=..., cuda= or hip=), and from late 2024 "benchmark version: N";
- per shape (`benchmark_mm`): FLOPs = 2 m n k (`flos = 2 * m * n * k`); TFLOP/s = FLOPs / (t x 1e12) with t the mean,
  median and fastest of the timed iterations (mean, median, max TFLOP/s); one line per shape, "%6.1f(mean)
  %6.1f(median) %6.1f(max) @ MxNxK", which the log file keeps (the console overwrites it with \\r);
- the summary: "mean:/median:/max:   X TFLOPS @ MxNxK (MxNxK)" (%.1f), then a geometric (and later arithmetic) mean
  over all shapes' mean TFLOP/s. Releases before 2024-12-23 (commit 9057122) printed one line, "The best outcome
  was X TFLOPS @ MxNxK (MxNxK) (tried N shapes)", where X is the fastest iteration's rate (`np.amin(times)`): a max.
mamf-finder prints no times: the time of a figure is the one its TFLOP/s implies under 2mnk, which is xmfu's matmul
convention too, so TFLOP/s re-derive exactly; what is checked is the log's consistency (a shape's max, from its
fastest iteration, is at least its median and mean; the summary's best figures are the best of the shapes' lines).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from xmfu.harness.results.importers import LogError

STATS = ("mean", "median", "max")
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float32": "fp32", "float": "fp32",
          "float8_e4m3fn": "fp8", "float8_e4m3fnuz": "fp8"}
PRECISION = 0.05  # every TFLOP/s figure is printed %.1f (%6.1f)
_SHAPE = r"(\d+)x(\d+)x(\d+)"


@dataclass
class Shape:
    m: int
    n: int
    k: int
    line: int
    printed: dict[str, float] = field(default_factory=dict)  # mean / median / max TFLOP/s
    said: list[str] = field(default_factory=list)  # the log's own inconsistencies about this shape

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k  # mamf-finder.py `flos = 2 * m * n * k`


@dataclass
class Parsed:
    tool: str
    version: str | None
    command: str | None
    device: str | None
    platform: str
    dtype: str
    shapes: dict[tuple[int, int, int], Shape] = field(default_factory=dict)
    tried: int | None = None


def _shape(parsed: Parsed, m: str, n: str, k: str, line: int) -> Shape:
    key = (int(m), int(n), int(k))
    if key not in parsed.shapes:
        parsed.shapes[key] = Shape(*key, line)
    return parsed.shapes[key]


def _header(lines: list[str]) -> Parsed:
    text = "\n".join(lines)
    command = None
    for i, line in enumerate(lines):
        if line.strip() == "** Command line:" and i + 1 < len(lines):
            command = lines[i + 1].strip()
    version = re.search(r"benchmark version:\s*(\S+)", text)
    device = re.search(r"Properties\(name='([^']+)'", text)
    dtype = re.search(r"\*\* Dtype:\s*(?:torch\.)?(\w+)", text) or re.search(r"--dtype[ =](\w+)", text)
    platform = "rocm" if re.search(r"gcnArchName|\bhip=|ROCm|hipBLASLt", text) else "cuda"
    name = dtype.group(1) if dtype else "bfloat16"  # mamf-finder.py --dtype default: "bfloat16"
    return Parsed("mamf-finder", version.group(1) if version else None, command,
                  device.group(1) if device else None, platform, DTYPES.get(name, name))


def parse(text: str) -> Parsed:
    lines = text.splitlines()
    parsed = _header(lines)
    best: dict[str, tuple[float, tuple[int, int, int], int]] = {}
    for number, line in enumerate(lines, 1):
        s = line.strip()
        if m := re.match(r"\d+ \|\s*([\d.]+)\(mean\)\s+([\d.]+)\(median\)\s+([\d.]+)\(max\) @ " + _SHAPE, s):
            shape = _shape(parsed, *m.group(4, 5, 6), number)
            shape.printed.update(zip(STATS, map(float, m.group(1, 2, 3)), strict=True))
        elif m := re.match(r"(mean|median|max):\s+([\d.]+) TFLOPS @ " + _SHAPE, s):
            best[m.group(1)] = (float(m.group(2)), tuple(map(int, m.group(3, 4, 5))), number)
        elif m := re.match(r"The best outcome was ([\d.]+)\s*TFLOPS @ " + _SHAPE + r".*?tried (\d+) shapes", s):
            best["max"] = (float(m.group(1)), tuple(map(int, m.group(2, 3, 4))), number)
            parsed.tried = int(m.group(5))
        elif m := re.match(r"Tried\s+(\d+) shapes", s):
            parsed.tried = int(m.group(1))
    if not best and not parsed.shapes:
        raise LogError("no mamf-finder results in the log: neither a shape's `(mean) (median) (max) @ MxNxK` line "
                       "nor the summary's `median: X TFLOPS @ MxNxK`")
    if parsed.shapes and not best:
        raise LogError("the log has shapes' lines but no summary (`Tried N shapes => the best outcomes were:`): it "
                       "is truncated")
    _summary(parsed, best)
    return parsed


def _summary(parsed: Parsed, best: dict[str, tuple[float, tuple[int, int, int], int]]) -> None:
    """The summary's best figures, joined to their shapes and checked against the shapes' own lines."""
    measured = dict(parsed.shapes)
    for stat, (value, key, number) in best.items():
        shape = _shape(parsed, *map(str, key), number)
        if stat in shape.printed and abs(shape.printed[stat] - value) > 2 * PRECISION:
            shape.said.append(f"summary {stat} {value} TFLOP/s at {shape.m}x{shape.n}x{shape.k}, but the shape's own "
                              f"line printed {shape.printed[stat]}")
        shape.printed.setdefault(stat, value)
        top = max((s.printed.get(stat, 0.0) for s in measured.values()), default=0.0)
        if measured and top > value + 2 * PRECISION:
            shape.said.append(f"summary best {stat} {value} TFLOP/s, but a shape's line printed {top}")
    for shape in parsed.shapes.values():
        for stat in ("mean", "median"):
            if stat in shape.printed and "max" in shape.printed \
                    and shape.printed["max"] < shape.printed[stat] - 2 * PRECISION:
                shape.said.append(f"max {shape.printed['max']} TFLOP/s (the fastest iteration) is below the {stat} "
                                  f"{shape.printed[stat]}: the fastest iteration cannot be slower than the {stat}")
