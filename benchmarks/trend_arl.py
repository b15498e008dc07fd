"""The trend breaks' false-alarm budget: each check's trend-break detector on healthy noise,
its average run length (ARL0, steps between false findings) at its threshold, and the
threshold its budget asks for.

    python benchmarks/trend_arl.py [--steps 1000000] [--budget 1000000] [--seed 0]

The noise model is the one each detector is built for: independent Gaussian noise (the
check's raw values), smoothed the way the check smooths it (an EWMA of weight 0.3; the grad
norm's median of five), fed as the check feeds it. Correlated noise is handled by the
detector itself (it sums in the units of a correlated sum: ``detectors.trend.Correlation``),
so independent noise is the reference. A false finding is an episode: the CUSUM crossing the
threshold after it was last at 0.

The budget is per series: one false finding in ``--budget`` healthy steps (10^6: with ten
judged series, one healthy run of 1,000 steps in 100 gets one; a finding's severity is judged
after, so a warning is rarer still). ARL0 grows about exponentially in the threshold h, so it
is measured where crossings are frequent (thresholds 4 to 30) and ``ln ARL0 = a + b h`` is
fitted on the thresholds crossed at least 5 times, then solved for the budget.

The reward chaos CUSUM is measured the same way, on the check itself fed a flat reward: with
Gaussian noise, and with Student-t noise of 5 degrees of freedom (an excess kurtosis of 6,
heavier than the detrended train rewards of real runs), since the heavy tail is what its
clipped squared bends are exposed to.
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from streamwatch.checks.reward import RewardCheck
from streamwatch.config import EngineConfig, TrendSettings
from streamwatch.detectors.trend import TrendBreak

GRID = tuple(range(4, 31))


@dataclass(frozen=True)
class Use:
    """A check's trend break: where it is configured and how its values are smoothed."""

    name: str
    settings: TrendSettings
    mode: str
    median5: bool = False  # the grad norm's: the median of the last five, not an EWMA


def uses(config: EngineConfig | None = None) -> list[Use]:
    e = config or EngineConfig()
    return [
        Use("entropy.collapse_trend", e.entropy.collapse_trend, "down"),
        Use("entropy.blowup_trend", e.entropy.blowup_trend, "up"),
        Use("reward.collapse_trend", e.reward.collapse_trend, "down"),
        Use("length.explosion_trend", e.length.explosion_trend, "up"),
        Use("length.collapse_trend", e.length.collapse_trend, "down"),
        Use("length.truncation_trend", e.length.truncation_trend, "up"),
        Use("spike.growth_trend", e.spike.growth_trend, "up", median5=True),
        Use("mismatch.growth_trend", e.mismatch.growth_trend, "up"),
        Use("signal.drain_trend", e.signal.drain_trend, "down"),
    ]


def episodes(statistics: Iterator[float]) -> dict[int, int]:
    """Episodes of a CUSUM above each threshold of the grid: a crossing counts once until
    the statistic is back at 0."""
    counts = dict.fromkeys(GRID, 0)
    armed = dict.fromkeys(GRID, True)
    for stat in statistics:
        if stat == 0.0:
            for h in GRID:
                armed[h] = True
            continue
        for h in GRID:
            if stat <= h:
                break
            if armed[h]:
                counts[h] += 1
                armed[h] = False
    return counts


def crossings(use: Use, steps: int, seed: int) -> dict[int, int]:
    """Episodes of the detector's CUSUM above each threshold of the grid on healthy noise."""
    return episodes(_trend_statistics(use, steps, seed))


def _trend_statistics(use: Use, steps: int, seed: int) -> Iterator[float]:
    s = use.settings
    t = TrendBreak(
        use.mode,
        lag=s.lag,
        span=s.span,
        slack=s.slack,
        threshold=math.inf,
        clip=s.clip,
        settle=s.settle,
    )
    rng = random.Random(seed)
    last: list[float] = []
    smooth = math.nan
    for _ in range(steps):
        x = 0.02 * rng.gauss(0.0, 1.0)
        v = x
        if use.median5:
            last.append(x)
            if len(last) > 5:
                last.pop(0)
            v = sorted(last)[len(last) // 2]
        if not use.median5:  # the grad norm's median of five is not smoothed further
            v = v if smooth != smooth else smooth + 0.3 * (v - smooth)
        smooth = v
        t.update(smooth, x)
        yield t.statistic


def chaos_crossings(steps: int, seed: int, df: int = 0) -> dict[int, int]:
    """Episodes of the reward chaos CUSUM (``RewardCheck.chaos_evidence``, the check fed a
    flat reward) above each threshold of the grid: its steps are the squared bends of the
    values, which are not exact log-likelihood ratios (Wald's bound ``h = ln ARL0`` is not
    theirs). ``df``: Student-t noise of that many degrees of freedom (0: Gaussian)."""
    return episodes(_chaos_statistics(steps, seed, df))


def _chaos_statistics(steps: int, seed: int, df: int) -> Iterator[float]:
    check = RewardCheck("train_reward", "reward", EngineConfig().reward)
    rng = random.Random(seed)
    for step in range(steps):
        z = rng.gauss(0.0, 1.0)
        if df:  # a t draw scaled to unit variance
            chi = sum(rng.gauss(0.0, 1.0) ** 2 for _ in range(df)) / df
            z = z / math.sqrt(chi) / math.sqrt(df / (df - 2))
        check.update(step, 0.5 + 0.02 * z)
        yield check.chaos_evidence


def fit(counts: dict[int, int], steps: int) -> tuple[float, float]:
    """``(a, b)`` of ``ln ARL0 = a + b h`` over the thresholds crossed at least 5 times,
    weighted by their counts (a count's relative error is about 1 / sqrt(count))."""
    pts = [(h, math.log(steps / k), k) for h, k in counts.items() if k >= 5]
    if len(pts) < 2:
        return math.nan, math.nan
    w = sum(k for *_, k in pts)
    mh = sum(h * k for h, _, k in pts) / w
    my = sum(y * k for _, y, k in pts) / w
    sxy = sum(k * (h - mh) * (y - my) for h, y, k in pts)
    sxx = sum(k * (h - mh) ** 2 for h, _, k in pts)
    b = sxy / sxx
    return my - b * mh, b


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300_000, help="healthy steps per detector")
    parser.add_argument("--budget", type=float, default=1e6, help="ARL0 asked of each series")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(
        f"# {args.steps:,} healthy steps per detector (independent Gaussian noise, smoothed as "
        f"the check smooths it); budget: ARL0 >= {args.budget:,.0f} steps"
    )
    print(f"{'detector':<26}{'threshold':>10}{'ARL0 there':>14}{'budget h':>10}{'ARL0 x2/h':>11}")
    rows = [
        (use.name, use.settings.threshold, crossings(use, args.steps, args.seed)) for use in uses()
    ]
    chaos = EngineConfig().reward.chaos_cusum_threshold
    for df, noise in ((0, "gauss"), (5, "t5")):
        counts = chaos_crossings(args.steps, args.seed, df)
        rows.append((f"reward.chaos_cusum ({noise})", chaos, counts))
    for name, h, counts in rows:
        a, b = fit(counts, args.steps)
        arl = math.exp(a + b * h)
        needed = (math.log(args.budget) - a) / b
        print(f"{name:<26}{h:>10.1f}{arl:>14,.0f}{needed:>10.1f}{math.exp(b):>11.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
