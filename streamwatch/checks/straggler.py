"""Rank stragglers: one process far slower than its peers at the same steps.

At each step with at least ``min_peers`` sources, the slowest source is compared with the
peers' median in robust units (1.4826 x MAD, floored at 2% of the median so identical peers
do not make every difference infinite). The same source slowest and far out for ``persist``
steps in a row is a straggler. For throughput-like indicators slow means low.
"""

from __future__ import annotations

from statistics import median

from streamwatch.config import StragglerSettings
from streamwatch.incidents import Finding, Kind, Severity

_SCALE_FLOOR = 0.02


class StragglerCheck:
    kinds: tuple[Kind, ...] = (Kind.RANK_STRAGGLER,)

    def __init__(
        self, indicator: str, metric: str, settings: StragglerSettings, higher_is_slower: bool
    ) -> None:
        self.indicator = indicator
        self.metric = metric
        self.s = settings
        self.sign = 1.0 if higher_is_slower else -1.0
        self.suspect = ""
        self.streak = 0
        self.since = -1

    def update(self, step: int, by_source: list[tuple[str, float]]) -> list[Finding]:
        if len(by_source) < self.s.min_peers:
            return []
        values = [v for _, v in by_source]
        med = median(values)
        scale = max(1.4826 * median(abs(v - med) for v in values), _SCALE_FLOOR * abs(med))
        if scale == 0.0:
            return []
        source, value = max(by_source, key=lambda sv: self.sign * sv[1])
        z = self.sign * (value - med) / scale
        slower = value / med if self.sign > 0 else med / value if value else float("inf")
        if z <= self.s.robust_z or slower <= self.s.ratio:
            self.suspect, self.streak = "", 0
            return []
        if source != self.suspect:
            self.suspect, self.streak, self.since = source, 0, step
        self.streak += 1
        if self.streak < self.s.persist:
            return []
        severity = Severity.WARNING
        return [
            Finding(
                Kind.RANK_STRAGGLER,
                self.indicator,
                self.metric,
                severity,
                step,
                f"straggler: {source} is {slower:.2f}x slower than its {len(values) - 1} peers "
                f"on {self.metric} for {self.streak} steps",
                {
                    "source": source,
                    "value": value,
                    "peers_median": med,
                    "slower_ratio": slower,
                    "robust_z": z,
                    "peers": len(values) - 1,
                    "steps": self.streak,
                },
                onset_step=self.since,
            )
        ]
