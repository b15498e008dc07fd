"""The runs of a ledger: read once from recorded files (series, tags, the engine's incidents)
and sorted into the baseline and the candidates by selectors.

A selector is ``tag:KEY=VALUE`` (a run any of whose events carries the tag; VALUE may be a
glob) or a glob matched against a run's file path, its file name and its run id (a run the
live service consumes has no file: its run id). A candidate
is written ``[NAME=]SELECTOR``; without a name it is called after its run when it has one,
else after the selector.

>>> arm = parse_arm("clip-higher=runs/clip-*.jsonl", "eps_high 0.28")
>>> arm.name, arm.selector, arm.description
('clip-higher', 'runs/clip-*.jsonl', 'eps_high 0.28')
>>> parse_arm("tag:variant=dyn", "").selector
'tag:variant=dyn'
"""

from __future__ import annotations

import fnmatch
import glob
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from streamwatch.config import Config
from streamwatch.incidents import Incident
from streamwatch.replay.files import replay_files
from streamwatch.report.data import RunData, SeriesCollector
from streamwatch.sources import path_run_ids, read_events

__all__ = ["Arm", "RecordedRun", "assign", "expand_selectors", "parse_arm", "read_runs"]

_NAMED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.+-]*)=(?=.)")
_MAX_TAGS = 64


@dataclass(frozen=True)
class Arm:
    """One candidate of the ledger: its name, how its runs are chosen, what it changes."""

    name: str
    selector: str
    description: str = ""


def parse_arm(text: str, description: str) -> Arm:
    """``[NAME=]SELECTOR`` and the intervention's description (see the module doc)."""
    m = _NAMED.match(text)
    if m and not text.startswith("tag:"):
        return Arm(m.group(1), text[m.end() :], description)
    return Arm("", text, description)


@dataclass
class RecordedRun:
    """One run of one file (``path``; None for a run the live service consumes): its series,
    the tags its events carried and its incidents."""

    key: str
    path: Path | None
    data: RunData
    tags: dict[str, str] = field(default_factory=dict)
    incidents: list[Incident] = field(default_factory=list)

    @property
    def last_step(self) -> int:
        return self.data.last_step()


def _is_tag(selector: str) -> bool:
    return selector.startswith("tag:")


def expand_selectors(selectors: Iterable[str]) -> list[Path]:
    """The files the file-pattern selectors name (tag selectors name none)."""
    out: dict[str, None] = {}
    for sel in selectors:
        if _is_tag(sel):
            continue
        hits = sorted(glob.glob(sel)) if any(c in sel for c in "*?[") else [sel]
        for hit in hits:
            if Path(hit).exists():
                out[hit] = None
    return [Path(p) for p in out]


def read_runs(
    paths: Sequence[Path], config: Config | None = None, metrics: Iterable[str] = ()
) -> list[RecordedRun]:
    """Every run of every file, read once for its series and tags and replayed through the
    engine for its incidents. Files whose data names no run are named after their paths,
    told apart from the other files' (:func:`~streamwatch.sources.run_ids.run_ids`); a run
    id the data of an earlier file named too is keyed ``FILE:RUN``."""
    wanted = list(metrics)
    runs: list[RecordedRun] = []
    keys: set[str] = set()
    ids = path_run_ids(paths)
    for path in paths:
        collector = SeriesCollector(config, metrics=wanted)
        tags: dict[str, dict[str, str]] = {}
        for event in read_events([path], on_problem=lambda _p: None, path_ids=ids):
            collector.add(event)
            if event.tags:
                seen = tags.setdefault(event.run_id, {})
                for k, v in event.tags.items():
                    if len(seen) < _MAX_TAGS:
                        seen.setdefault(k, v)
        incidents: dict[str, list[Incident]] = {}
        for inc in replay_files([path], config, path_ids=ids).incidents:
            incidents.setdefault(inc.run_id, []).append(inc)
        for run_id, data in collector.runs().items():
            key = run_id if run_id not in keys else f"{path.name}:{run_id}"
            keys.add(key)
            data.run_id = key
            runs.append(
                RecordedRun(key, path, data, tags.get(run_id, {}), incidents.get(run_id, []))
            )
    return runs


def matches(selector: str, run: RecordedRun) -> bool:
    """Whether ``selector`` (see the module doc) chooses ``run``."""
    if _is_tag(selector):
        key, _, value = selector[4:].partition("=")
        have = run.tags.get(key)
        return have is not None and fnmatch.fnmatchcase(have, value or "*")
    if run.path is None:
        return any(fnmatch.fnmatchcase(n, selector) for n in (run.key, run.data.run_id))
    names = (str(run.path), run.path.name, run.key, run.data.run_id)
    return any(fnmatch.fnmatchcase(n, selector) for n in names) or (
        Path(selector).exists() and Path(selector).resolve() == run.path.resolve()
    )


def assign(
    runs: Sequence[RecordedRun], baseline: Sequence[str], arms: Sequence[Arm]
) -> tuple[list[RecordedRun], list[tuple[Arm, list[RecordedRun]]], list[RecordedRun]]:
    """The baseline's runs, each candidate's, and the runs no selector chose.

    A run chosen by the baseline and a candidate, or by two candidates, is an error that
    names it: a run belongs to one arm of a ledger."""
    owner: dict[str, str] = {}
    base = [r for r in runs if any(matches(s, r) for s in baseline)]
    for r in base:
        owner[r.key] = "the baseline"
    groups: list[tuple[Arm, list[RecordedRun]]] = []
    for arm in arms:
        chosen = [r for r in runs if matches(arm.selector, r)]
        if not chosen:
            raise ValueError(f"candidate {arm.name or arm.selector!r}: no run matches it")
        name = arm.name or (chosen[0].key if len(chosen) == 1 else arm.selector)
        for r in chosen:
            if r.key in owner:
                where = "" if r.path is None else f" ({r.path})"
                raise ValueError(
                    f"run {r.key}{where} is chosen by both {owner[r.key]} and candidate "
                    f"{name!r}: give each run to one arm"
                )
            owner[r.key] = f"candidate {name!r}"
        groups.append((Arm(name, arm.selector, arm.description), chosen))
    if not base:
        raise ValueError(f"no run matches the baseline ({', '.join(baseline)})")
    names = [a.name for a, _ in groups]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ValueError(f"two candidates are called {dup!r}: name them NAME=SELECTOR")
    rest = [r for r in runs if r.key not in owner]
    return base, groups, rest
