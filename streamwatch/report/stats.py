"""The statistics behind ``compare``: per-window tests, the onset search and effect intervals.

Two situations, two noise models:

- several runs (seeds) on at least one side: the noise is the **between-seed** variation.
  Each window is tested with Welch's t on the per-seed window means (:func:`welch`); a side
  with a single run borrows the other side's spread (a prediction-interval t).
- one run per side: there is no between-seed variation to measure, only **within-run**
  noise. The difference of the two runs' window means is judged against its own
  window-to-window variation (:func:`window_noise`: a robust sd of its first differences),
  and the effect's interval comes from a moving-block bootstrap over windows. This says
  whether the difference exceeds the runs' own noise, not whether another seed would
  reproduce it.

The onset is found by fixed-sequence testing (:func:`onset_index`): windows are tested from
the last backwards, each at the full level, stopping at the first that is not significant.
Testing in a fixed order needs no further correction within an indicator; across
indicators the caller divides alpha (Bonferroni).

>>> import numpy as np
>>> est = welch(np.array([0.50, 0.52, 0.49]), np.array([0.61, 0.63, 0.60]))
>>> round(est.diff, 3), est.p < 0.01
(0.11, True)
>>> onset_index([0.9, 0.2, 0.001, 0.002, 0.0001], [1, 1, 1, 1, 1], alpha=0.01)
2
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import stats as _scipy_stats

__all__ = [
    "Estimate",
    "block_bootstrap_ci",
    "onset_index",
    "t_interval",
    "welch",
    "window_noise",
    "within_run_test",
]

FloatArray = npt.NDArray[np.float64]
_MAD_TO_SD = 1.4826


@dataclass(frozen=True)
class Estimate:
    """A difference (candidate - baseline), its standard error, degrees of freedom, p-value."""

    diff: float
    se: float
    df: float
    p: float


def _two_sided_p(diff: float, se: float, df: float) -> float:
    if not math.isfinite(se):
        return 1.0
    if se == 0.0:
        return 1.0 if diff == 0.0 else 0.0
    return float(2.0 * _scipy_stats.t.sf(abs(diff) / se, df))


def t_interval(est: Estimate, level: float) -> tuple[float, float]:
    """The two-sided ``level`` interval of ``est.diff`` from its t distribution."""
    if est.se == 0.0:
        return est.diff, est.diff
    q = float(_scipy_stats.t.ppf(0.5 + level / 2.0, est.df))
    return est.diff - q * est.se, est.diff + q * est.se


def welch(baseline: FloatArray, candidate: FloatArray) -> Estimate | None:
    """Welch's t for the mean difference of two groups of per-seed values.

    With one value on a side, that side is taken to vary like the other (se of a new
    observation against a group mean, df = n - 1). None when there is no spread to
    measure (fewer than three values, or one per side).
    """
    b, c = baseline[np.isfinite(baseline)], candidate[np.isfinite(candidate)]
    nb, nc = len(b), len(c)
    if nb == 0 or nc == 0 or (nb < 2 and nc < 2):
        return None
    diff = float(c.mean() - b.mean())
    if nb >= 2 and nc >= 2:
        vb, vc = float(b.var(ddof=1)) / nb, float(c.var(ddof=1)) / nc
        se2 = vb + vc
        denom = (vb * vb / (nb - 1) if vb else 0.0) + (vc * vc / (nc - 1) if vc else 0.0)
        df = se2 * se2 / denom if denom > 0 else float(nb + nc - 2)
    else:
        group = c if nb == 1 else b
        n = len(group)
        se2 = float(group.var(ddof=1)) * (1.0 + 1.0 / n)
        df = float(n - 1)
    se = math.sqrt(se2)
    return Estimate(diff, se, df, _two_sided_p(diff, se, df))


def window_noise(diffs: FloatArray) -> float:
    """The noise sd of one window's difference, from the window-to-window variation.

    A robust sd of the first differences, divided by sqrt(2): a level shift or a steady
    trend in the difference (what is being tested) barely moves it. NaN with fewer than
    four windows.
    """
    d = diffs[np.isfinite(diffs)]
    if len(d) < 4:
        return math.nan
    step = np.diff(d)
    mad = float(np.median(np.abs(step - np.median(step))))
    sd = _MAD_TO_SD * mad if mad > 0 else float(step.std(ddof=1))
    return sd / math.sqrt(2.0)


def within_run_test(diffs: FloatArray) -> list[Estimate | None]:
    """Per-window tests of a one-run-per-side difference against its window-to-window noise."""
    sd = window_noise(diffs)
    k = int(np.isfinite(diffs).sum())
    if not math.isfinite(sd):
        return [None] * len(diffs)
    df = float(max(k - 2, 1))
    return [
        Estimate(float(d), sd, df, _two_sided_p(float(d), sd, df)) if math.isfinite(d) else None
        for d in diffs
    ]


def onset_index(
    p: Sequence[float], sign: Sequence[float], alpha: float, min_windows: int = 2
) -> int | None:
    """The first window from which every testable window to the end is significant.

    Fixed-sequence test: from the last testable window backwards, each window is rejected if
    ``p <= alpha`` and its difference has the sign of the last one; the walk stops at the
    first that is not. Windows with a NaN p-value (no data) are passed over. Returns the
    index of the earliest rejected window, or None if fewer than ``min_windows`` windows
    were rejected (a difference seen in the last window alone has not "stayed").
    """
    found: int | None = None
    direction = 0.0
    rejected = 0
    for i in range(len(p) - 1, -1, -1):
        if not math.isfinite(p[i]):
            continue
        s = math.copysign(1.0, sign[i]) if sign[i] != 0 else 0.0
        if p[i] > alpha or s == 0.0 or (direction and s != direction):
            break
        direction = s
        found = i
        rejected += 1
    return found if rejected >= min_windows else None


def block_bootstrap_ci(
    x: FloatArray, level: float, *, n_boot: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the mean of ``x`` by a moving-block bootstrap.

    Blocks of ceil(n ** (1/3)) consecutive values keep the serial dependence of the
    windows. Deterministic for a given ``seed``.
    """
    v = x[np.isfinite(x)]
    n = len(v)
    if n == 0:
        return math.nan, math.nan
    if n == 1:
        return float(v[0]), float(v[0])
    block = max(1, math.ceil(n ** (1.0 / 3.0)))
    blocks = math.ceil(n / block)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, n - block + 1, size=(n_boot, blocks))
    idx = (starts[:, :, None] + np.arange(block)).reshape(n_boot, -1)[:, :n]
    means = v[idx].mean(axis=1)
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(means, [tail, 1.0 - tail])
    return float(lo), float(hi)
