"""What every health check shares: the contract and small helpers."""

from __future__ import annotations

import math
from typing import Protocol

from streamwatch.incidents import Finding, Kind

__all__ = ["Check", "PyChecks", "Results", "SeriesChecks", "ratio"]


class Check(Protocol):
    """A health check over one series of per-step values.

    ``update`` is called once per step with the step's finite value and returns what is
    unhealthy now (empty when the check looked and saw health for all its ``kinds``).
    """

    kinds: tuple[Kind, ...]

    def update(self, step: int, x: float) -> list[Finding]: ...


#: What a series' checks say of one value: each check's kinds, with what it found.
Results = list[tuple[tuple[Kind, ...], list[Finding]]]


class SeriesChecks(Protocol):
    """The checks of one series: ``judge`` hands a value to each, in order; ``quiet`` too,
    but answers None when none of them found anything (all a run with no incident open
    needs to know)."""

    def judge(self, step: int, x: float) -> Results: ...

    def quiet(self, step: int, x: float) -> Results | None: ...

    def __len__(self) -> int: ...


class PyChecks:
    """The checks of one series, in order (the reference engine; ``streamwatch_native.Checks``
    is the compiled one, with the same ``judge``)."""

    __slots__ = ("checks",)

    def __init__(self, checks: list[Check]) -> None:
        self.checks = checks

    def judge(self, step: int, x: float) -> Results:
        return [(check.kinds, check.update(step, x)) for check in self.checks]

    def quiet(self, step: int, x: float) -> Results | None:
        results: Results | None = None
        for i, check in enumerate(self.checks):
            found = check.update(step, x)
            if found and results is None:
                results = [(c.kinds, []) for c in self.checks[:i]]
            if results is not None:
                results.append((check.kinds, found))
        return results

    def __len__(self) -> int:
        return len(self.checks)


def ratio(a: float, b: float) -> float:
    """a / b without dividing by zero (inf when b is 0 and a is not)."""
    if b == 0.0:
        return 1.0 if a == 0.0 else math.copysign(math.inf, a)
    return a / b
