"""Rank stragglers: one process far slower than its peers at the same steps.

At each step with at least ``min_peers`` sources, the slowest source is compared with the
peers' median in robust units (1.4826 x MAD, floored at 2% of the median so identical peers
do not make every difference infinite). The same source slowest and far out for ``persist``
steps in a row is a straggler. For throughput-like indicators slow means low.

A rank that slows down gradually is never far out on one step: each source also has a
one-sided CUSUM of its slowness relative to the peers' median (its value / the median - 1),
less its own usual offset (followed slowly), in units of the ranks' usual spread (the mean
over ranks of that slowness, as a Gaussian sd, followed over steps), less ``trend_slack`` a
step; above ``trend_threshold``, and at least ``trend_ratio`` times slower, it is a straggler
too. The sources followed are bounded (``max_sources``).
"""

from __future__ import annotations

import math
from statistics import fmean, median
from typing import Final

from mypy_extensions import mypyc_attr

from streamwatch.config import StragglerSettings
from streamwatch.engine.findings import Finding
from streamwatch.incidents import Kind, Severity

_SCALE_FLOOR: Final = 0.02
_SD_PER_MEAN_ABS: Final = math.sqrt(math.pi / 2)
_FOLLOW: Final = 0.05  # weight of a new step in the ranks' spread
_FOLLOW_USUAL: Final = 0.02  # ...and in a source's usual offset (slower: a slowdown is not usual)
_SPREAD_FLOOR: Final = 0.002  # ranks' usual relative spread, at least (identical ranks)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class StragglerCheck:
    kinds: tuple[Kind, ...] = (Kind.RANK_STRAGGLER,)

    def __init__(
        self, indicator: str, metric: str, settings: StragglerSettings, higher_is_slower: bool
    ) -> None:
        self.indicator = indicator
        self.metric = metric
        self.s = settings
        self._min_peers = settings.min_peers  # read on every value
        self.sign = 1.0 if higher_is_slower else -1.0
        self.suspect = ""
        self.streak = 0
        self.since = -1
        self.steps = 0
        self.spread = 0.0  # the ranks' usual relative spread, followed over steps
        self.sources: dict[str, list[float]] = {}  # source -> [usual offset, CUSUM, since]

    def update(self, step: int, by_source: list[tuple[str, float]]) -> list[Finding]:
        if len(by_source) < self._min_peers:
            return []
        values = [v for _, v in by_source]
        med = median(values)
        scale = max(1.4826 * median(abs(v - med) for v in values), _SCALE_FLOOR * abs(med))
        if scale == 0.0:
            return []
        source, value = max(by_source, key=lambda sv: self.sign * sv[1])
        z = self.sign * (value - med) / scale
        slower = value / med if self.sign > 0 else med / value if value else float("inf")
        drifting = self._drifting(step, by_source, med)
        if drifting is not None:
            return [drifting]
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

    def _drifting(
        self, step: int, by_source: list[tuple[str, float]], med: float
    ) -> Finding | None:
        """Each source's CUSUM of slowness relative to its peers; the worst past the
        threshold, if it is slow enough."""
        if med == 0.0:
            return None
        s = self.s
        slow = [(src, self.sign * (v / med - 1.0)) for src, v in by_source]
        spread = _SD_PER_MEAN_ABS * fmean([abs(r) for _, r in slow])  # few ranks: no MAD
        self.steps += 1
        warming = self.steps <= s.trend_warmup
        self.spread += (spread - self.spread) * (1.0 / self.steps if warming else _FOLLOW)
        unit = max(self.spread, _SPREAD_FLOOR)
        worst: tuple[float, str, float] | None = None
        sources = self.sources
        for src, r in slow:
            state = sources.get(src)
            if state is None:
                if len(sources) >= s.max_sources:
                    continue
                state = sources[src] = [r, 0.0, float(step)]
            usual, stat, _ = state
            if warming:
                state[0] = usual + (r - usual) / self.steps
                continue
            stat = max(0.0, stat + min((r - usual) / unit, 4.0) - s.trend_slack)
            state[0] = usual + (r - usual) * _FOLLOW_USUAL
            if stat == 0.0:
                state[2] = float(step)
            state[1] = stat
            over = stat > s.trend_threshold and 1.0 + r > s.trend_ratio
            if over and (worst is None or stat > worst[0]):
                worst = (stat, src, r)
        if worst is None:
            return None
        stat, src, r = worst
        return Finding(
            Kind.RANK_STRAGGLER,
            self.indicator,
            self.metric,
            Severity.WARNING,
            step,
            f"straggler: {src} has been slowing down against its {len(slow) - 1} peers on "
            f"{self.metric}: {1.0 + r:.2f}x their median",
            {
                "source": src,
                "slower_ratio": 1.0 + r,
                "trend_break_sds": stat,
                "usual_spread": unit,
                "peers": len(slow) - 1,
            },
            onset_step=int(sources[src][2]),
        )
