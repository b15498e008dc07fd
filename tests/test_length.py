"""The length-explosion check on hand-made curves: fast and slow explosions, healthy drift."""

from __future__ import annotations

import math
import random

from streamwatch.checks import LengthCheck
from streamwatch.config import LengthSettings
from streamwatch.incidents import Finding, Kind


def explosions(lengths: list[float]) -> list[Finding]:
    check = LengthCheck("response_length", "response_length/mean", LengthSettings())
    found: list[Finding] = []
    for step, x in enumerate(lengths):
        found += [f for f in check.update(step, x) if f.kind is Kind.LENGTH_EXPLOSION]
    return found


def noisy(levels: list[float], seed: int) -> list[float]:
    rng = random.Random(seed)
    return [x * math.exp(0.03 * rng.gauss(0.0, 1.0)) for x in levels]


def test_a_length_doubling_in_thirty_steps_is_an_explosion() -> None:
    """1.3x per 10 steps: slower than the 1.5x-in-10 test, but 2.2x within 30 steps."""
    for seed in range(5):
        levels = [400.0] * 100 + [400.0 * 1.3 ** (t / 10) for t in range(1, 31)] + [880.0] * 20
        found = explosions(noisy(levels, seed))
        assert found, f"seed {seed}: not found"
        assert 100 < found[0].step <= 130
        assert "x in" in found[0].message


def test_healthy_growth_is_not_an_explosion() -> None:
    """2x over 1,000 steps: the slow growth of a healthy run."""
    for seed in range(5):
        levels = [400.0 * 2 ** (t / 1000) for t in range(1000)]
        assert explosions(noisy(levels, seed)) == []
