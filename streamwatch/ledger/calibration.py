"""The ledger on null sweeps: seeds of one simulated setup split into a "baseline" and
"candidates" that change nothing. Every verdict other than "not distinguishable" is false;
``benchmarks/ledger.py`` prints their share, and a test holds it at 5% or less.

A sweep writes its runs to recorded files and reads them back as ``streamwatch ledger``
does (series, tags, the engine's incidents). Some candidates can be cut short, as runs still
running are (``running``: that many candidates end at ``cut`` of the steps).
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from streamwatch.ledger.entries import Ledger, build_ledger
from streamwatch.ledger.runs import Arm, read_runs
from streamwatch.report.policy import Verdict
from streamwatch.simulate import Fault, RunSpec, simulate_run, write_jsonl

__all__ = ["NullSweep", "null_sweep"]


@dataclass(frozen=True)
class NullSweep:
    ledger: Ledger
    counts: Counter[Verdict]
    false: tuple[tuple[str, str, str], ...]  # (candidate, indicator, verdict)

    @property
    def verdicts(self) -> int:
        return sum(self.counts.values())

    @property
    def share_not_distinguishable(self) -> float:
        return self.counts[Verdict.INDISTINGUISHABLE] / max(self.verdicts, 1)


def null_sweep(
    seeds: Sequence[int],
    *,
    baseline: int,
    per_candidate: int = 1,
    steps: int = 300,
    framework: str = "verl",
    running: int = 0,
    cut: float = 0.5,
    correction: str = "holm",
    candidate_faults: tuple[Fault, ...] = (),
) -> NullSweep:
    """One null sweep over ``seeds`` (the first ``baseline`` of them the baseline).
    ``candidate_faults``: injected into every candidate run instead, to measure the power to
    see a real effect (the sweep is then no longer null)."""
    with tempfile.TemporaryDirectory(prefix="sw-null-") as tmp:
        paths = []
        for k, seed in enumerate(seeds):
            spec = RunSpec(
                f"null-{seed}",
                steps=steps,
                seed=seed,
                hosts=1,
                ranks_per_host=1,
                framework=framework,
                faults=candidate_faults if k >= baseline else (),
            )
            events = simulate_run(spec)
            first = k - baseline
            if 0 <= first < running * per_candidate:
                events = (e for e in events if e.step < int(cut * steps))
            path = Path(tmp) / f"null-{seed}.jsonl"
            write_jsonl(events, path)
            paths.append(path)
        runs = read_runs(paths)
    base, rest = runs[:baseline], runs[baseline:]
    groups = [
        (
            Arm(f"null-{i}", f"seeds {rest[i * per_candidate].key}..."),
            rest[i * per_candidate : (i + 1) * per_candidate],
        )
        for i in range(len(rest) // per_candidate)
    ]
    ledger = build_ledger(base, groups, correction=correction)
    counts: Counter[Verdict] = Counter()
    false = []
    for e in ledger.entries:
        for name, v in e.verdicts().items():
            counts[v] += 1
            if v is not Verdict.INDISTINGUISHABLE:
                false.append((e.arm.name, name, v.value))
    return NullSweep(ledger, counts, tuple(false))
