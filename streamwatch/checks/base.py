"""What every health check shares: the contract and small helpers."""

from __future__ import annotations

import math

from mypy_extensions import mypyc_attr

from streamwatch.engine.findings import Finding
from streamwatch.incidents import Kind

__all__ = ["COLLAPSED_BELOW", "Check", "fall_word", "ratio"]


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Check:
    """A health check over one series of per-step values, the base of every such check.

    ``update`` is called once per step with the step's finite value and returns what is
    unhealthy now (empty when the check looked and saw health for all its ``kinds``).
    A base class, not a protocol: the compiled build calls ``update`` through its native
    method table, with the step and value unboxed.
    """

    kinds: tuple[Kind, ...] = ()

    def update(self, step: int, x: float) -> list[Finding]:
        raise NotImplementedError


def ratio(a: float, b: float) -> float:
    """a / b without dividing by zero (inf when b is 0 and a is not)."""
    if b == 0.0:
        return 1.0 if a == 0.0 else math.copysign(math.inf, a)
    return a / b


#: A series below this share of its reference is "collapsing"; above it (a dip of less than a
#: third), it is "falling": the words match the size of the fall.
COLLAPSED_BELOW = 2.0 / 3.0


def fall_word(r: float) -> str:
    """How a fall to ``r`` times its reference is said.

    >>> fall_word(0.85), fall_word(0.4)
    ('falling', 'collapsing')
    """
    return "collapsing" if r < COLLAPSED_BELOW else "falling"
