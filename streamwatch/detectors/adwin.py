"""A change in the mean level of a signal, found by river's ADWIN."""

from __future__ import annotations

from river.drift import ADWIN


class LevelShift:
    """ADWIN over a signal, ignoring non-finite values.

    >>> d = LevelShift(clock=1)
    >>> hits = [d.update(x) for x in [0.0, 0.1, -0.1] * 20 + [5.0] * 10]
    >>> hits.index(True)
    67
    """

    __slots__ = ("_adwin", "clock", "delta", "grace_period")

    def __init__(self, delta: float = 0.002, clock: int = 4, grace_period: int = 10) -> None:
        self.delta = delta
        self.clock = clock
        self.grace_period = grace_period
        self._adwin = ADWIN(delta=delta, clock=clock, grace_period=grace_period)  # type: ignore[no-untyped-call]

    def update(self, x: float) -> bool:
        """Feed one value; True on the update that finds a change."""
        if x - x != 0.0:  # nan or inf
            return False
        adwin = self._adwin
        adwin.update(x)  # type: ignore[no-untyped-call]
        return adwin.drift_detected is True

    @property
    def drift_detected(self) -> bool:
        return bool(self._adwin.drift_detected)
