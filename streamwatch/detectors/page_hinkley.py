"""A sustained shift in a normalised signal, found by river's Page-Hinkley test."""

from __future__ import annotations

import math

from river.drift import PageHinkley


class SustainedShift:
    """Page-Hinkley on a signal already in noise-sd units, clipped so one blip cannot trip it.

    ``mode`` is "up" or "down"; ``delta`` is the drift tolerated (sd per update) and
    ``threshold`` the cumulative excess (in sds) that signals a shift. With delta 0.5 and
    threshold 8, a shift of k sds is found after about 8 / (k - 0.5) updates, and pure noise
    rarely gets that far (about once in 3,000 updates).

    >>> s = SustainedShift("up", min_instances=5)
    >>> noise = [0.1, -0.2, 0.0, 0.3, -0.1, 0.2, -0.3, 0.1, 0.0, -0.1]
    >>> hits = [s.update(z) for z in noise + [3.0] * 15]
    >>> hits.index(True)
    14
    """

    __slots__ = ("_ph", "clip", "delta", "min_instances", "mode", "threshold")

    def __init__(
        self,
        mode: str,
        *,
        delta: float = 0.5,
        threshold: float = 8.0,
        clip: float = 4.0,
        min_instances: int = 10,
    ) -> None:
        if mode not in ("up", "down"):
            raise ValueError(f"mode must be 'up' or 'down', got {mode!r}")
        self.mode = mode
        self.delta = delta
        self.threshold = threshold
        self.clip = clip
        self.min_instances = min_instances
        self._ph = PageHinkley(
            min_instances=min_instances, delta=delta, threshold=threshold, mode=mode
        )

    def update(self, z: float) -> bool:
        """Feed one normalised value; True on the update that finds the shift."""
        if not math.isfinite(z):
            return False
        self._ph.update(max(-self.clip, min(self.clip, z)))  # type: ignore[no-untyped-call]
        return bool(self._ph.drift_detected)

    @property
    def drift_detected(self) -> bool:
        return bool(self._ph.drift_detected)
