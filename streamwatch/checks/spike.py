"""Loss / grad-norm / KL spikes that persist.

A value far from the recent median (in robust sds, and a multiple of the median's size) for
``persist`` steps in a row. Single-step spikes, common in healthy runs (grad norm 60x for one
step), do not count: the median and MAD of the window ignore them.
"""

from __future__ import annotations

import math

from streamwatch.config import SpikeSettings
from streamwatch.detectors import Persistence, Window
from streamwatch.incidents import Finding, Kind, Severity


class SpikeCheck:
    kinds: tuple[Kind, ...] = (Kind.METRIC_SPIKE,)

    def __init__(self, indicator: str, metric: str, settings: SpikeSettings) -> None:
        self.indicator = indicator
        self.metric = metric
        self.s = settings
        self._window = Window(settings.window)
        self._spiking = Persistence(settings.persist)
        self.first_step = -1

    def update(self, step: int, x: float) -> list[Finding]:
        w = self._window
        if not w.full:
            w.update(x)
            return []
        med = w.median()
        dist = abs(x - med)
        # the size test first: it is cheap, and most values fail it (no spread needed then)
        spike = dist > (self.s.factor - 1.0) * abs(med)
        sd = math.nan
        if spike:
            sd = max(w.robust_sd(), 1e-12)
            spike = dist > self.s.robust_z * sd
        w.update(x)
        if spike and self._spiking.streak == 0:
            self.first_step = step
        if not self._spiking.update(spike):
            return []
        size = x / med if med else float("inf")
        severity = Severity.CRITICAL if abs(size) >= 10 * self.s.factor else Severity.WARNING
        return [
            Finding(
                Kind.METRIC_SPIKE,
                self.indicator,
                self.metric,
                severity,
                step,
                f"{self.metric} spiking for {self._spiking.streak} steps: {x:.4g} against a "
                f"recent median of {med:.4g}",
                {
                    "value": x,
                    "window_median": med,
                    "window_robust_sd": sd,
                    "robust_z": dist / sd,
                    "times_median": size,
                    "steps_spiking": self._spiking.streak,
                },
                onset_step=self.first_step,
            )
        ]
