"""The profile of a profile-guided compiled build (``STREAMWATCH_PGO=1``, see setup.py):
the instrumented engine judges simulated runs (healthy ones and one of each failure) and,
in a source checkout, the real verl runs of tests/data/real, interleaved step by step as a
service sees them. It runs in a few seconds; the compiler reads the counts it leaves."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import streamwatch
from streamwatch.engine.monitor import Monitor
from streamwatch.events import Event
from streamwatch.simulate import FAULT_KINDS, healthy_spec, random_fault_spec, simulate

REAL = Path(__file__).resolve().parent.parent / "tests" / "data" / "real"


def real_events(steps: int = 300) -> list[Event]:
    """The real runs, each read forwards then backwards to ``steps`` steps, step by step."""
    runs = []
    for path in sorted(REAL.glob("*.jsonl")):
        rows = [json.loads(line) for line in path.open()]
        rows = [r for r in rows if r["step"] >= 1]
        if rows:
            runs.append((path.stem, rows + rows[::-1]))
    return [
        Event(run_id=name, step=i + 1, metrics=rows[i % len(rows)]["metrics"])
        for i in range(steps)
        for name, rows in runs
    ]


def main() -> int:
    if not streamwatch.build().startswith("compiled"):
        print("pgo_train: the compiled build is not the one imported", file=sys.stderr)
        return 1
    specs = [healthy_spec(f"healthy-{i}", seed=i, steps=300) for i in range(4)]
    specs += [random_fault_spec(kind, seed=7, steps=300) for kind in FAULT_KINDS]
    monitor = Monitor()
    updates = sum(len(monitor.process(event)) for event in simulate(specs))
    updates += sum(len(monitor.process(event)) for event in real_events())
    print(f"pgo_train: {len(monitor.runs)} runs, {updates} incident updates")
    return 0


if __name__ == "__main__":
    sys.exit(main())
