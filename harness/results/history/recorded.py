"""Judgements as they were made (issue 38, item 5): the rule (judge.Rule) and each series' state, written into the
store beside its runs by the nightly (`<store>/_judgements/<suite or run id>.json`) and read back by `history check`
and the history page, so that a rule changed since (another window, threshold, minimum) is named beside the verdict
instead of silently re-judging the nights already judged. The leading '_' keeps the folder out of the table pyarrow
and pandas read from the store (their dataset readers skip names that start with '_' or '.')."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from xmfu.harness.results.history import states
from xmfu.harness.results.history.judge import Rule
from xmfu.harness.results.schema import RUN_ID

FOLDER = "_judgements"
SCHEMA = "xmfu.judgement/1"


@dataclass(frozen=True)
class Recorded:
    """One night's judgement as the store keeps it."""

    id: str  # the suite run's id (or the run's, outside a suite)
    judged_at: str  # UTC, ISO 8601
    run_ids: list[str]
    rule: Rule
    nights: dict[str, str]  # metric -> the night's state
    series: list[dict[str, Any]]  # states.SeriesState.as_dict(), every metric's

    def as_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, **dataclasses.asdict(self)}


def made(id_: str, run_ids: Sequence[str], rule: Rule, found: Sequence[states.SeriesState]) -> Recorded:
    """The record of a judgement made now of `found` (every metric's series states) under `rule`."""
    metrics = sorted({s.metric for s in found})
    return Recorded(id_, datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"), list(run_ids), rule,
                    {m: states.night([s for s in found if s.metric == m]) for m in metrics},
                    [s.as_dict() for s in found])


def write(store: Path, record: Recorded) -> Path:
    """Into the store's _judgements/, written under a temporary name and renamed; ValueError for an id that is
    not a plain name (it names the file)."""
    if not RUN_ID.match(record.id):
        raise ValueError(f"judgement id {record.id!r} is not a plain name (letters, digits, '.', '_', '-')")
    folder = store / FOLDER
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{record.id}.json"
    tmp = folder / f".{record.id}.{os.getpid()}.tmp"
    try:
        tmp.write_text(json.dumps(record.as_dict(), indent=1) + "\n")
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


def _read(path: Path) -> Recorded | None:
    """A record, or None for a file that is not one (unreadable, another schema)."""
    try:
        raw = json.loads(path.read_text())
        fields = {f.name for f in dataclasses.fields(Rule)}
        rule = Rule(**{k: v for k, v in raw["rule"].items() if k in fields})
        return Recorded(str(raw["id"]), str(raw["judged_at"]), list(raw["run_ids"]), rule, dict(raw["nights"]),
                        list(raw["series"])) if raw.get("schema") == SCHEMA else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def load(store: Path) -> tuple[list[Recorded], list[Path]]:
    """(the store's judgements, oldest first; the files in _judgements/ that are not one)."""
    found, bad = [], []
    for path in sorted((store / FOLDER).glob("*.json")):
        record = _read(path)
        if record is None:
            bad.append(path)
        else:
            found.append(record)
    return sorted(found, key=lambda r: r.judged_at), bad


def rule_changes(recorded: Sequence[Recorded], rule: Rule) -> list[tuple[Recorded, list[str]]]:
    """Each recorded judgement made under another rule than `rule`, with what differs ('window 7 -> 5')."""
    return [(r, diff) for r in recorded if (diff := rule.differences(r.rule))]


def notes(store: Path, rule: Rule) -> list[str]:
    """What a judgement under `rule` should say about the store's records: the judgements made under another rule
    (counted, the latest named with what differs), and the files in _judgements/ that are not records."""
    past, bad = load(store)
    said = [f"{path} is not a judgement record; left out" for path in bad]
    changed = rule_changes(past, rule)
    if changed:
        last, diff = changed[-1]
        said.append(f"{len(changed)} of the {len(past)} judgements recorded in the store were made under another "
                    f"rule (latest: {last.id}, {last.judged_at}: {'; '.join(diff)}); their verdicts stand as "
                    "recorded, this one is under the rule above")
    return said
