"""What every health check shares: the contract and small helpers."""

from __future__ import annotations

import math
from typing import Protocol

from streamwatch.incidents import Finding, Kind

__all__ = ["Check", "ratio"]


class Check(Protocol):
    """A health check over one series of per-step values.

    ``update`` is called once per step with the step's finite value and returns what is
    unhealthy now (empty when the check looked and saw health for all its ``kinds``).
    """

    kinds: tuple[Kind, ...]

    def update(self, step: int, x: float) -> list[Finding]: ...


def ratio(a: float, b: float) -> float:
    """a / b without dividing by zero (inf when b is 0 and a is not)."""
    if b == 0.0:
        return 1.0 if a == 0.0 else math.copysign(math.inf, a)
    return a / b
