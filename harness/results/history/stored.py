"""One row of the history store as a typed record: every column of the store, declared once, with its type and
the value a file written before the column existed reads as (null).

The store's Arrow schema is built from this record (parquet.schema), `parquet.flatten` makes these records from
a bundle's rows, and `parquet.load` returns them, so the readers of the store (judge, trend, coverage_history,
the history page, `xmfu history`, the nightly) read attributes, and a column's default lives here only.
"""

from __future__ import annotations

import typing
from datetime import datetime

import msgspec

SERIES_KEY = ("workload", "case_id", "backend", "device", "dtype", "comparability_key")  # never mix meanings


class Stored(msgspec.Struct, frozen=True, kw_only=True):
    """One (case, backend) of one stored run, flat. The fields are in the order of the store's columns; the ones
    without a default are in every file of the store (parquet.IDENTITY: a file without them is refused)."""

    run_id: str
    created: datetime  # UTC, aware
    git_sha: str | None = None  # '' where the manifest has none
    xmfu_version: str | None = None
    platform: str | None = None
    device: str
    workload: str
    case_id: str
    backend: str
    dtype: str
    status: str
    comparability_key: str
    torch: str | None = None  # the stack's versions ('' where the environment has none); parquet.stack_versions
    jax: str | None = None
    driver: str | None = None
    # added later: the rest of the stack a number depends on, the host, the suite a run was part of (name/version/
    # definition hash), and the coverage variant (attention: 'causal fwd_bwd'...)
    cuda: str | None = None
    hip: str | None = None
    nccl: str | None = None
    jaxlib: str | None = None
    triton: str | None = None
    host: str | None = None
    suite: str | None = None
    variant: str | None = None
    # added later still: why the run marked the row contended ('' when it did not); the row's quality flags
    # (harness/results/analysis/flags.py: 'contended, CI missed', '' for none)
    contention: str | None = None
    flags: str | None = None
    timing_valid: bool | None = None  # null (a file without the column) is not valid: such rows are never judged
    # the figures (parquet.COLUMNS reads each from a bundle row; null where a row has none)
    median_s: float | None = None
    ci95_low_s: float | None = None
    ci95_high_s: float | None = None
    cv: float | None = None
    tflops: float | None = None
    mfu: float | None = None
    busbw_gbps: float | None = None
    tokens_per_s: float | None = None
    # added later: inference latencies (median and p99 of the time to first token, prefill rows, and per output
    # token, decode rows) and memory-bandwidth utilization
    ttft_s: float | None = None
    ttft_p99_s: float | None = None
    tpot_s: float | None = None
    tpot_p99_s: float | None = None
    mbu: float | None = None
    contended: bool | None = None  # the row's own evidence that its timing was disturbed
    # added later: the suite run a part's bundle belongs to (its parts are one run: `history report` counts it once);
    # '' outside a suite, null in files written before it
    suite_id: str | None = None
    # added later (issue 38, item 2): how to make the row again, and what it ran in: the run's overrides as one shell
    # line (`xmfu run` + this repeats the run), the bundle folder it was added from, and the image digest the run
    # recorded (XMFU_IMAGE_DIGEST in environment.json's container); '' where the run has none
    overrides: str | None = None
    bundle: str | None = None
    image_digest: str | None = None
    # added later (issue 39): the row's energy (its `energy` section): where it came from ('' in rows without one),
    # mean power, J per token and tokens/s per W of the token kind tokens_per_s counts, TFLOP/s per W
    energy_source: str | None = None
    mean_power_w: float | None = None
    j_per_token: float | None = None
    tokens_per_s_per_w: float | None = None
    tflops_per_w: float | None = None

    def key(self) -> tuple:
        """The row's series (SERIES_KEY): runs compare only within one."""
        return tuple(getattr(self, name) for name in SERIES_KEY)

    def figure(self, metric: str) -> float | None:
        """A figure column named at run time (a command's --metric, a suite's check list). A name that is no figure
        column has no value, as when the rows were dicts and such a name read as null."""
        return getattr(self, metric) if metric in FIGURES else None


def kinds() -> dict[str, type]:
    """Each column's type, null aside, in the order of the columns."""
    out = {}
    for name, hint in typing.get_type_hints(Stored).items():
        out[name] = next((t for t in typing.get_args(hint) if t is not type(None)), hint)
    return out


FIGURES = tuple(name for name, kind in kinds().items() if kind is float)
