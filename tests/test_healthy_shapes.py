"""Healthy runs whose numbers a check can misread (benchmarks/third_family.py): each shape
raises no warning. The shapes: a slow monotone decline over thousands of steps, a very noisy
flat reward of a small batch, a count named like a ratio, a weak model's first step, a small
policy's entropy early."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from streamwatch.engine.monitor import Monitor
from streamwatch.incidents import Severity, Status

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _family() -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))  # third_family imports healthy_family beside it
    try:
        spec = importlib.util.spec_from_file_location(
            "third_family", BENCHMARKS / "third_family.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCHMARKS))


FAMILY = _family()
SHAPES = list(FAMILY.SHAPES)
#: three seeds of each shape (seed % 5 picks the shape), and a slow decline whose train
#: reward's noise reference once swung low enough to make the chaos CUSUM climb
SEEDS = [*range(3 * len(SHAPES)), 45]


@pytest.mark.parametrize("seed", SEEDS, ids=[f"{SHAPES[s % len(SHAPES)]}-{s}" for s in SEEDS])
def test_a_healthy_shape_raises_no_warning(seed: int) -> None:
    run = FAMILY.third_run(seed)
    monitor = Monitor()
    out = [u for event in run.events for u in monitor.process(event)]
    serious = [
        f"{u.kind}@{u.step} {u.severity.value}"
        for u in out
        if u.status is Status.FIRING and u.severity is not Severity.INFO
    ]
    assert serious == [], run.run_id


def test_the_weak_first_step_is_said_as_an_info() -> None:
    seed = SHAPES.index("weak_first_step")
    run = FAMILY.third_run(seed)
    monitor = Monitor()
    out = [u for event in run.events[:3] for u in monitor.process(event)]
    first = [u for u in out if u.step == 1 and u.kind == "no_learning_signal"]
    assert first and all(u.severity is Severity.INFO for u in first)
    assert "one step of evidence" in str(first[0].evidence.get("held_as"))
