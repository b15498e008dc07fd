"""Count consecutive true conditions: one blip is not a trend."""

from __future__ import annotations

from mypy_extensions import mypyc_attr


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Persistence:
    """``update(cond)`` returns True once ``cond`` held for ``needed`` updates in a row.

    >>> p = Persistence(2)
    >>> [p.update(c) for c in (True, False, True, True, True)]
    [False, False, False, True, True]
    """

    __slots__ = ("needed", "streak")

    def __init__(self, needed: int) -> None:
        if needed < 1:
            raise ValueError(f"needed must be >= 1, got {needed}")
        self.needed = needed
        self.streak = 0

    def update(self, cond: bool) -> bool:
        self.streak = self.streak + 1 if cond else 0
        return self.streak >= self.needed
