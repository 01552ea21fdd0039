"""`xmfu compare`: matching cases of two or more bundles (or two sides of several) side by side, with the speedup,
its 95% CI, the verdict and the variance it used; `--references` each headline figure against its public
reference; `--price` the cost per token and per realized PFLOP-hour."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xmfu.harness.cli.common import (
    Parser,
    UsageFailure,
    usage_error,
    validated_bundles,
)

if TYPE_CHECKING:  # annotations only: the command imports what it uses when it runs
    from xmfu.harness.results.analysis.compare import Comparison, Noise, Side

SIDE = "@@side@@"  # stands for a literal `--` between the sides of `xmfu compare`


def _compare_parser() -> argparse.ArgumentParser:
    from xmfu.harness.config.run_settings import RunSettings

    parser = Parser(prog="xmfu compare")
    parser.add_argument("bundles", nargs="*")
    parser.add_argument("--baseline", help="run id or position (0-based) of the baseline side; default the first")
    parser.add_argument("--format", default="table", choices=("table", "csv", "json", "markdown"))
    parser.add_argument("--allow-incomparable", action="store_true",
                        help="compare rows whose comparability keys differ (they are marked)")
    parser.add_argument("--margin", type=float, default=RunSettings.equivalence_margin,
                        help="speedups within 1 +- this are equivalent (default %(default)s, a run's "
                             "equivalence_margin)")
    parser.add_argument("--noise-floor", type=float, default=0.10,
                        help="with one run per side and no noise estimate, smaller differences are not called")
    parser.add_argument("--noise-from", metavar="STORE", help="history store whose recent runs give the noise")
    parser.add_argument("--fail-on", choices=("slower",), help="exit 1 when any verdict is slower")
    parser.add_argument("--strict", action="store_true",
                        help="give a verdict even on rows a run marked contended (by default: inconclusive)")
    parser.add_argument("--price", action="append", default=[], metavar="DEVICE=USD_PER_HOUR")
    parser.add_argument("--prices", help="YAML file mapping device name to USD per device-hour")
    parser.add_argument("--price-kwh", type=float, metavar="USD_PER_KWH",
                        help="price of energy: adds the energy line (rows' measured J x PUE) to the cost columns")
    parser.add_argument("--pue", type=float, help="the facility's power usage effectiveness (>= 1), with --price-kwh")
    parser.add_argument("--references", action="store_true",
                        help="instead: each bundle's headline figures against their public references (xmfu "
                             "references), one or more bundles")
    return parser


def _sides(tokens: list[str]) -> list[list[str]]:
    """`A B C` -> three sides of one bundle; `A1 A2 -- B1 B2` -> two sides of two bundles."""
    if SIDE not in tokens:
        return [[t] for t in tokens]
    sides, current = [], []
    for t in tokens:
        if t == SIDE:
            sides.append(current)
            current = []
        else:
            current.append(t)
    return [*sides, current]


def cmd_compare(args: Sequence[str]) -> int:
    from xmfu.harness.config.run_settings import RunSettings
    from xmfu.harness.engine.declare import check_of
    from xmfu.harness.results.analysis.compare import Side, compare
    from xmfu.harness.results.bundle.validator import cycles_uncollected
    from xmfu.harness.results.render.compare_render import render

    ns = _compare_parser().parse_intermixed_args([SIDE if a == "--" else a for a in args])
    if ns.references:
        return _compare_references(ns)
    sides = _sides(ns.bundles)
    if len(sides) < 2 or any(not side for side in sides):
        return usage_error("compare: give at least two bundles, or two non-empty sides around '--' "
                            "(xmfu compare A1 A2 -- B1 B2)")
    fraction = check_of(RunSettings, "equivalence_margin")  # --noise-floor is a fraction of the same kind
    for name, value in (("--margin", ns.margin), ("--noise-floor", ns.noise_floor)):
        if not fraction.allows(value):
            return usage_error(f"compare: {name} {value} is out of range. Allowed: {fraction.allowed()}")
    try:
        loaded = [Side([b for f in side for b in validated_bundles("compare", f)]) for side in sides]
        prices = _prices(ns)
        energy = _energy_price(ns)
        noise = _history_noise(ns.noise_from) if ns.noise_from else None
    except UsageFailure as exc:
        return usage_error(str(exc))
    base = _baseline_index(ns.baseline, loaded)
    if base is None:
        labels = ", ".join(s.label for s in loaded)
        return usage_error(f"compare: --baseline {ns.baseline!r} is neither a run id ({labels}) "
                            f"nor a position 0-{len(loaded) - 1}")
    # Comparing makes a few dicts per line and no cycles: the collector, which would walk them 150 times for two
    # 4,000-row bundles (35 ms CPU), waits until the text is made (validator.cycles_uncollected)
    with cycles_uncollected():
        result = compare(loaded, base, ns.allow_incomparable, ns.margin, ns.noise_floor, noise, ns.strict)
        if prices:
            _unpriced_note(ns, {r.device for s in loaded for b in s.bundles for r in b.rows})
        _add_costs(result, loaded, prices, energy)
        text = render(result, ns.format)
    print(text)
    if result.unmatched and not result.rows and not result.refused:
        print("xmfu: compare: no case matched: " + "; ".join(result.unmatched), file=sys.stderr)
        return 2
    if ns.fail_on == "slower" and any(r["verdict"] == "slower" for r in result.rows):
        return 1
    return 1 if result.refused and not result.rows else 0


def _compare_references(ns: argparse.Namespace) -> int:
    """`xmfu compare --references BUNDLE...`: the headline figures against their public references, as a table."""
    from xmfu.harness.machine.references import default_bands
    from xmfu.harness.suites import yardsticks

    tokens = [t for t in ns.bundles if t != SIDE]
    if not tokens:
        return usage_error("compare: --references needs at least one bundle (xmfu compare --references BUNDLE...)")
    try:
        bundles = [b for path in tokens for b in validated_bundles("compare", path)]
    except UsageFailure as exc:
        return usage_error(str(exc))
    print(yardsticks.render(yardsticks.of_bundles(bundles, default_bands()), ns.format))
    return 0


def _prices(ns: argparse.Namespace) -> dict[str, float]:
    from xmfu.harness.results.analysis.cost import load_prices, parse_prices

    try:
        return {**(load_prices(ns.prices) if ns.prices else {}), **parse_prices(ns.price)}
    except ValueError as exc:  # each names its option (--price, --prices)
        raise UsageFailure(f"compare: {exc}") from None
    except OSError as exc:  # the --prices file cannot be read; the error alone would name only the path
        raise UsageFailure(f"compare: --prices {ns.prices}: {exc.strerror or exc}") from None


def _energy_price(ns: argparse.Namespace) -> Any:
    from xmfu.harness.results.analysis.cost import energy_price

    try:
        return energy_price(ns.price_kwh, ns.pue)
    except ValueError as exc:
        raise UsageFailure(f"compare: {str(exc).replace('price_kwh=', '--price-kwh ').replace('pue=', '--pue ')}") \
            from None


def _unpriced_note(ns: argparse.Namespace, devices: set[Any]) -> None:
    """A price whose device no row has is named on stderr with the devices the rows have: prices are matched to
    rows by the exact device name (docs/compare.md), and a misspelt one would otherwise leave the cost columns
    empty without a word. A --prices file may list a whole fleet: it is named only when none of it matches."""
    from xmfu.harness.results.analysis.cost import load_prices, parse_prices

    # both were read once by _prices without error
    missed = sorted(d for d in parse_prices(ns.price) if d not in devices)
    if ns.prices and not set(load_prices(ns.prices)) & devices:
        missed.append(f"every device in --prices {ns.prices}")
    if missed:
        have = ", ".join(sorted(repr(d) for d in devices if d)) or "none"
        print(f"xmfu: compare: no row has the device of {', '.join(repr(m) for m in missed)}, so it is not "
              f"priced (a price names the device exactly as rows record it). The rows' devices: {have}",
              file=sys.stderr)


def _history_noise(store: str) -> Noise:
    from xmfu.harness.results.history import judge, parquet

    try:
        return judge.run_to_run_noise(parquet.load(Path(store)))
    except (RuntimeError, OSError, ValueError) as exc:  # ValueError: parquet.StoreError
        raise UsageFailure(f"compare: --noise-from {store}: {exc}") from None


def _baseline_index(baseline: str | None, sides: list[Any]) -> int | None:
    if baseline is None:
        return 0
    labels = [s.label for s in sides]
    runs = [[b.manifest["run_id"] for b in s.bundles] for s in sides]
    for i, ids in enumerate(runs):
        if baseline == labels[i] or baseline in ids:
            return i
    return int(baseline) if baseline.isdigit() and int(baseline) < len(sides) else None


def _add_costs(result: Comparison, sides: list[Side], prices: dict[str, float], energy: Any = None) -> None:
    """Each line's cost at its devices' prices and the energy price, and its energy figures (J/token, TFLOP/s/W) from
    both rows wherever they were measured, priced or not."""
    from xmfu.harness.results.analysis.cost import break_even, energy_verdict, with_energy

    rows = {(s.label, r.case_id, r.backend): r for s in sides for b in s.bundles for r in b.rows}
    for row in result.rows:  # the comparison's lines (dicts of its output), each priced from its bundles' rows
        cand, ref = rows[(row["run"], row["case_id"], row["backend"])], rows[
            (row["baseline_run"], row["case_id"], row["backend"])]
        p_cand, p_ref = prices.get(cand.device), prices.get(ref.device)
        if cand.energy is not None or ref.energy is not None:  # rows written since issue 39
            row["energy"], row["baseline_energy"] = _energy_of(cand), _energy_of(ref)
            row["energy_verdict"] = energy_verdict(row["energy"], row["baseline_energy"])
        if not (prices or energy):
            continue
        row["cost"] = with_energy(cand, p_cand, energy)
        row["baseline_cost"] = with_energy(ref, p_ref, energy)
        if prices:
            row.update(break_even(row["speedup"], p_cand / p_ref if p_cand and p_ref else None))


def _energy_of(row: Any) -> dict[str, Any]:
    """A row's J/token (a training step's tokens, else generated, else prompt tokens) and TFLOP/s/W."""
    e = row.energy
    per = (e.j_per_token or {}) if e is not None else {}
    kind = next((k for k in ("tokens", "generated_tokens", "prompt_tokens") if k in per), None)
    cis = (e.j_per_token_ci95 or {}) if e is not None else {}
    return {"j_per_token": per.get(kind) if kind else None, "j_per_token_ci95": cis.get(kind) if kind else None,
            "tflops_per_w": e.tflops_per_w if e else None, "energy_source": e.source if e else None}
