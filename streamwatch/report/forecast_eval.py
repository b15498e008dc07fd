"""How well each forecast of :mod:`streamwatch.report.forecast` does on recorded runs: for
every run long enough, forecasts made at each of ``FRACTIONS`` of the run against its final
value (the mean over the last 5% of steps). What ``benchmarks/forecast.py`` prints, and what
``CHOICE`` is measured from (:func:`best_methods`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from streamwatch.report.data import RunData, collect_runs
from streamwatch.report.forecast import FRACTIONS, METHODS, final_value, run_forecasts

__all__ = [
    "Decision",
    "Trial",
    "best_methods",
    "decisions",
    "evaluate_runs",
    "load_real_runs",
    "real_run_files",
    "summarise",
]

TARGETS = ("train_reward", "heldout_reward")
_SKIP = {"readme.md"}


@dataclass(frozen=True)
class Trial:
    """One forecast of one run's final value."""

    run: str
    indicator: str
    fraction: float
    method: str
    forecast: float
    lo: float
    hi: float
    final: float

    @property
    def error(self) -> float:
        return abs(self.forecast - self.final)

    @property
    def covered(self) -> bool:
        return self.lo <= self.final <= self.hi


def real_run_files(root: Path) -> list[Path]:
    """The recorded runs under ``root``: every ``file`` of the manifest ``runs.toml`` (one
    ``[[run]]`` per run), then every other file at the top level but the README (runs kept
    there that the manifest does not list); without a manifest, every file and directory
    there but the README."""
    manifest = root / "runs.toml"
    listed: list[Path] = []
    if manifest.exists():
        import tomllib

        entries = tomllib.loads(manifest.read_text(encoding="utf-8")).get("run", [])
        listed = [root / e["file"] for e in entries if isinstance(e, dict) and e.get("file")]
    skip = {p.resolve() for p in listed} | {manifest.resolve()}
    rest = [
        p
        for p in sorted(root.iterdir())
        if p.name.lower() not in _SKIP
        and p.resolve() not in skip
        and not (manifest.exists() and p.is_dir())
    ]
    return [*listed, *rest]


def evaluate_runs(
    runs: Iterable[RunData], min_steps: int, fractions: Sequence[float] = FRACTIONS
) -> list[Trial]:
    """Every method's forecast at each fraction of every run with ``min_steps`` steps."""
    trials: list[Trial] = []
    for run in runs:
        for indicator in TARGETS:
            series = run.find(indicator)
            reward = run.find("train_reward")
            if series is None or reward is None or len(reward) < min_steps:
                continue
            first, last = int(reward.steps[0]), int(reward.steps[-1])
            final = final_value(series.steps.astype(np.float64), series.values, last)
            if not math.isfinite(final):
                continue
            for fraction in fractions:  # of the logged span (a resumed run starts late)
                seen = first + math.floor(fraction * (last - first + 1)) - 1
                for method, f in run_forecasts(run, indicator, seen, last).items():
                    trials.append(
                        Trial(run.run_id, indicator, fraction, method, f.value, f.lo, f.hi, final)
                    )
    return trials


def summarise(
    trials: Sequence[Trial],
) -> dict[tuple[str, float, str], tuple[float, float, int]]:
    """Per (indicator, fraction, method): median absolute error, coverage, number of runs."""
    out: dict[tuple[str, float, str], tuple[float, float, int]] = {}
    keys = sorted({(t.indicator, t.fraction, t.method) for t in trials})
    for key in keys:
        group = [t for t in trials if (t.indicator, t.fraction, t.method) == key]
        errors = [t.error for t in group]
        out[key] = (
            float(np.median(errors)),
            sum(t.covered for t in group) / len(group),
            len(group),
        )
    return out


def _median_errors(
    by_run: dict[str, dict[str, float]], methods: Sequence[str]
) -> tuple[dict[str, float], int]:
    """Each method's median error over the runs on which every one of ``methods`` was fitted,
    and how many runs those are."""
    common = [errs for errs in by_run.values() if all(m in errs for m in methods)]
    if not common:
        return {}, 0
    return {m: float(np.median([errs[m] for errs in common])) for m in methods}, len(common)


@dataclass(frozen=True)
class Decision:
    """Why a method was chosen for one (indicator, fraction)."""

    method: str
    simple: dict[str, float]  # last and saturating, on the runs where both were fitted
    simple_runs: int
    every: dict[str, float]  # all three, on the runs where all three were fitted
    every_runs: int


def decisions(trials: Sequence[Trial]) -> dict[tuple[str, float], Decision]:
    """Per (indicator, fraction): the better simple forecast (last value or saturating curve,
    on the runs where both were fitted; the last value on a tie), unless the entropy-reward
    forecast's median absolute error is below both on the runs where all three were."""
    out: dict[tuple[str, float], Decision] = {}
    for indicator, fraction in sorted({(t.indicator, t.fraction) for t in trials}):
        by_run: dict[str, dict[str, float]] = {}
        for t in trials:
            if (t.indicator, t.fraction) == (indicator, fraction):
                by_run.setdefault(t.run, {})[t.method] = t.error
        simple, n_simple = _median_errors(by_run, ("last", "saturating"))
        if not simple:
            continue
        best = "saturating" if simple["saturating"] < simple["last"] else "last"
        every, n_every = _median_errors(by_run, METHODS)
        if every and every["entropy"] < min(every["last"], every["saturating"]):
            best = "entropy"
        out[(indicator, fraction)] = Decision(best, simple, n_simple, every, n_every)
    return out


def best_methods(trials: Sequence[Trial]) -> dict[tuple[str, float], str]:
    """The method :func:`decisions` chose, per (indicator, fraction)."""
    return {k: d.method for k, d in decisions(trials).items()}


def load_real_runs(paths: Sequence[Path]) -> tuple[list[RunData], list[str]]:
    """The runs of ``paths`` and, per path that could not be read, why."""
    runs: list[RunData] = []
    problems: list[str] = []
    for path in paths:
        try:
            found = collect_runs([path])
        except (OSError, ValueError) as exc:
            problems.append(f"{path.name}: {exc}")
            continue
        runs.extend(found.values())
    return runs, problems
