"""Where a failure that builds is heading: the step at which its series crosses the level at
which the check calls it critical, with an interval.

For entropy falling towards its floor, length growing towards the cap, truncation growing
towards 1 and held-out falling, the engine keeps each series' recent values (``window`` of
them) and, when such an incident is raised or updated (never per value), fits them:

1. The fit starts where the series bent: of every split of the window (the later part at
   least ``min_points`` values), the one where a straight line before it and one after it
   fit best (least squares) marks where the failure began; the later part is fitted.
2. A robust straight line through it (Theil-Sen: the median of the pairwise slopes) on a
   scale: the level or the log for entropy and length (the one whose fit of the first two
   thirds best predicts the last third, on the series' own scale), the probit for a ratio
   (a share of completions cut at the cap, when their log-lengths drift: a normal tail),
   the level for held-out.
3. The interval: the slope's 95% interval (Sen's, from Kendall's statistic) pivoted about the
   fit's centre, itself moved by its own 95% margin; the steeper slope nearer the level
   gives the earliest crossing, the gentler one the latest.

Held-out evaluations (the ``evaluations`` scale: their level) are fitted otherwise. They
come every N steps, and a fall is found 3-5 evaluations into it, too few for Sen's interval
(its normal approximation of Kendall's statistic needs more points); and their course is a
rise (learning), a plateau, then the fall, so the one bend of the window is mostly where
learning slowed, not where the fall began. The fall begins at the held-out's best (Gao et
al.: the true reward peaks, then falls): the fit starts where the part from the window's
highest evaluation on bent (a plateau after the peak is left out), with at least
``min_points`` evaluations. Through them, a least-squares line (an evaluation is a mean over
a fixed set of prompts: its noise is sampling noise, with none of the single-step outliers
Theil-Sen guards against) and the 95% interval of the step at which the line crosses the
level: Fieller's, with Student's t on n - 2 degrees of freedom (4.3 standard errors at 4
evaluations, 3.2 at 5), finite only when the slope itself is significant (t^2 s^2 / (b^2
Sxx) < 1): a fall not established from so few points gets no projection.

A projection is shown only when the fit is good: its slope's interval points towards the
level as a whole (the trend is real), the series has not crossed yet, the interval begins
after the current step and is no wider than the time left, and the crossing is no further
ahead than ``max_extrapolation`` times the span fitted. Otherwise the incident has none.

A series flat at 0.30 for 20 steps, then falling 0.01 a step (+-0.004 of noise):

>>> steps = list(range(100, 140))
>>> values = [0.30] * 20 + [0.30 - 0.01 * i + 0.004 * (-1) ** i for i in range(1, 21)]
>>> p = project(steps, values, 0.05, rising=False, scales=("level", "log"), now=139)
>>> p["from_step"], p["fit"]
(120, 'theil-sen level')
>>> from streamwatch.alerting.notes import describe_projection
>>> describe_projection("entropy", p)
'entropy projected to reach 0.05 near step 144, between 143 and 145'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from streamwatch.config import EngineConfig

__all__ = ["PROJECTED", "SCALES", "Target", "project", "target"]

Array = npt.NDArray[np.float64]
_NORMAL = NormalDist()
_EDGE = 1e-4  # ratios are kept within [_EDGE, 1 - _EDGE] on the probit scale
#: a fit whose later half moves at less than this share of its whole pace is levelling off
SETTLING = 0.5


def _probit(v: Array) -> Array:
    clipped = np.clip(v, _EDGE, 1.0 - _EDGE)
    return np.array([_NORMAL.inv_cdf(float(t)) for t in clipped], dtype=np.float64)


def _normal_cdf(v: Array) -> Array:
    return np.array([_NORMAL.cdf(float(t)) for t in v], dtype=np.float64)


def _log(v: Array) -> Array:
    return np.log(np.maximum(v, 1e-12))


def _level(v: Array) -> Array:
    return v


#: scale name -> (to the scale, back)
SCALES: dict[str, tuple[Callable[[Array], Array], Callable[[Array], Array]]] = {
    "level": (_level, _level),
    "log": (_log, np.exp),
    "probit": (_probit, _normal_cdf),
    "evaluations": (_level, _level),  # the level, fitted as held-out evaluations (module doc)
}


def _sse_line(x: Array, y: Array) -> float:
    if len(x) < 3:
        return 0.0
    xm, ym = x.mean(), y.mean()
    sxx = float(((x - xm) ** 2).sum())
    sxy = float(((x - xm) * (y - ym)).sum())
    syy = float(((y - ym) ** 2).sum())
    return syy - (sxy * sxy / sxx if sxx > 0 else 0.0)


def _bend(x: Array, y: Array, min_points: int) -> int:
    """Where the later part of the window starts: the split best fitted by two lines."""
    best, at = math.inf, 0
    for k in range(0, len(x) - min_points + 1):
        sse = _sse_line(x[:k], y[:k]) + _sse_line(x[k:], y[k:])
        if sse < best:
            best, at = sse, k
    return at


def _theil_sen(x: Array, y: Array, z: float) -> tuple[float, float, float, float]:
    """(slope, intercept, slope low, slope high) with Sen's interval at normal quantile z."""
    i, j = np.triu_indices(len(x), 1)
    dx = x[j] - x[i]
    keep = dx != 0
    slopes = np.sort((y[j] - y[i])[keep] / dx[keep])
    b = float(np.median(slopes))
    a = float(np.median(y - b * x))
    n, pairs = len(x), len(slopes)
    c = z * math.sqrt(n * (n - 1) * (2 * n + 5) / 18.0)
    lo = int(max(0, math.floor((pairs - c) / 2)))
    hi = int(min(pairs - 1, math.ceil((pairs + c) / 2)))
    return b, a, float(slopes[lo]), float(slopes[hi])


def t_quantile(confidence: float, df: int) -> float:
    """Student's t such that P(|T| < t) = ``confidence`` on ``df`` degrees of freedom (the
    closed-form distribution of an integer df, inverted by bisection).

    >>> [round(t_quantile(0.95, df), 3) for df in (1, 2, 3, 4, 30)]
    [12.706, 4.303, 3.182, 2.776, 2.042]
    """
    if df < 1 or not 0.0 < confidence < 1.0:
        raise ValueError(f"need df >= 1 and confidence in (0, 1), got {df} and {confidence}")

    def inside(t: float) -> float:  # P(|T| < t)
        theta = math.atan(t / math.sqrt(df))
        c2 = math.cos(theta) ** 2
        term = total = 1.0
        if df % 2 == 0:
            for k in range(1, df // 2):
                term *= c2 * (2 * k - 1) / (2 * k)
                total += term
            return math.sin(theta) * total
        if df == 1:
            return 2.0 * theta / math.pi
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        return 2.0 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)

    lo, hi = 0.0, 1.0
    while inside(hi) < confidence:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if inside(mid) < confidence else (lo, mid)
    return (lo + hi) / 2


def _least_squares(xs: Array, tys: Array, target: float, confidence: float) -> dict[str, Any]:
    """A least-squares line through a few values and Fieller's interval of the step at which
    it reaches ``target`` (module doc); ``real``: the slope is significant and heads there."""
    n = len(xs)
    xm, ym = float(xs.mean()), float(tys.mean())
    sxx = float(((xs - xm) ** 2).sum())
    b = float(((xs - xm) * (tys - ym)).sum()) / sxx if sxx > 0 else 0.0
    resid = tys - (ym + b * (xs - xm))
    s2 = float((resid**2).sum()) / (n - 2)
    t = t_quantile(confidence, n - 2)
    toward = 1.0 if target > ym else -1.0
    g = t * t * s2 / (b * b * sxx) if b != 0 else math.inf
    out: dict[str, Any] = {"scale": "evaluations", "check": math.inf, "from": float(xs[0])}
    out.update(span=float(xs[-1] - xs[0]), points=n, real=b * toward > 0 and g < 1.0)
    out["fit"] = "least-squares"
    if out["real"]:
        d = (target - ym) / b  # the crossing, from the centre of the steps
        half = t * math.sqrt(s2) / (abs(b) * (1 - g)) * math.sqrt((1 - g) / n + d * d / sxx)
        centre = xm + d / (1 - g)
        # a crossing is seen at the first evaluation after it: on the evaluations' grid
        last, every = float(xs[-1]), float(np.median(np.diff(xs)))

        def seen(step: float) -> float:
            return last + math.ceil((step - last) / every) * every

        out.update(step=seen(xm + d), low=seen(centre - half), high=seen(centre + half))
    return out


def _evaluations(
    x: Array, y: Array, level: float, rising: bool, min_points: int, z: float
) -> dict[str, Any] | None:
    """Held-out evaluations: the part from the best one on, from where it bent (module doc)."""
    best = int(np.argmin(y) if rising else np.argmax(y))
    x, y = x[best:], y[best:]
    if len(x) < min_points:
        return None
    k = _bend(x, y, min_points)
    return _least_squares(x[k:], y[k:], level, 2.0 * _NORMAL.cdf(z) - 1.0)


def _fit(
    x: Array, y: Array, level: float, scale: str, min_points: int, z: float
) -> dict[str, Any] | None:
    to, back = SCALES[scale]
    ty = to(y)
    k = _bend(x, ty, min_points)
    xs, ys, tys = x[k:], y[k:], ty[k:]
    if len(xs) < min_points:
        return None
    target = float(to(np.array([level]))[0])
    b, a, b_lo, b_hi = _theil_sen(xs, tys, z)
    x0 = float(np.median(xs))
    y0 = a + b * x0
    resid = tys - (a + b * xs)
    margin = z * 1.4826 * float(np.median(np.abs(resid - np.median(resid)))) / math.sqrt(len(xs))
    toward = 1.0 if target > y0 else -1.0
    steep, gentle = (b_hi, b_lo) if toward > 0 else (b_lo, b_hi)
    real = steep * toward > 0 and gentle * toward > 0 and b * toward > 0
    half = len(xs) // 2
    if real and len(xs) - half >= 4:
        # levelling off: a healthy curve falls (or grows) and settles; one heading for the
        # level keeps its pace
        recent = _theil_sen(xs[half:], tys[half:], z)[0]
        real = recent * toward >= SETTLING * b * toward
    # the predictive check: a line through the first two thirds, against the last third
    held = max(3, len(xs) // 3)
    check = math.inf
    if len(xs) - held >= 4:
        b2, a2, _, _ = _theil_sen(xs[:-held], tys[:-held], z)
        check = float(np.median(np.abs(ys[-held:] - back(a2 + b2 * xs[-held:]))))
    out: dict[str, Any] = {"scale": scale, "check": check, "real": real, "from": float(xs[0])}
    out["fit"] = "theil-sen"
    out["span"] = float(xs[-1] - xs[0])
    out["points"] = len(xs)
    if real:
        out["step"] = x0 + (target - y0) / b
        out["low"] = x0 + (target - (y0 + toward * margin)) / steep
        out["high"] = x0 + (target - (y0 - toward * margin)) / gentle
    return out


def project(
    steps: Sequence[float],
    values: Sequence[float],
    level: float,
    *,
    rising: bool,
    scales: Sequence[str],
    now: int,
    min_points: int = 6,
    confidence: float = 0.95,
    max_extrapolation: float = 5.0,
) -> dict[str, Any] | None:
    """The projected crossing of ``level`` by the series, or None when the fit is not good
    enough to show (module doc). ``rising``: the series heads up to the level."""
    x = np.asarray(steps, dtype=np.float64)
    y = np.asarray(values, dtype=np.float64)
    finite = np.isfinite(y)
    x, y = x[finite], y[finite]
    if len(x) < min_points or not math.isfinite(level):
        return None
    current = float(np.median(y[-3:]))
    if (current >= level) == rising:
        return None  # there already
    if "probit" in scales and not 0.0 < level < 1.0:
        return None
    z = _NORMAL.inv_cdf(0.5 + confidence / 2)
    fits = [
        f
        for s in scales
        if (
            f := _evaluations(x, y, level, rising, min_points, z)
            if s == "evaluations"
            else _fit(x, y, level, s, min_points, z)
        )
        is not None
    ]
    if not fits:
        return None
    best = min(fits, key=lambda f: f["check"])
    if not best["real"]:
        return None
    step, low, high = best["step"], best["low"], best["high"]
    ahead = step - now
    good = (
        ahead > 0
        and low > now - 1
        and high - low <= ahead
        and ahead <= max_extrapolation * max(best["span"], 1.0)
    )
    if not good:
        return None
    return {
        "level": level,
        "rising": rising,
        "step": round(step),
        "low": math.floor(low),
        "high": math.ceil(high),
        "made_at": now,
        "fit": f"{best['fit']} {best['scale']}",
        "from_step": round(best["from"]),
        "points": best["points"],
        "confidence": confidence,
    }


#: The kinds whose incidents are projected, and the series each projection reads.
PROJECTED: dict[str, tuple[str, ...]] = {
    "entropy_collapse": ("entropy", "token_prob"),
    "length_explosion": ("response_length",),
    "truncation_saturation": ("truncation_ratio",),
    "reward_hacking": ("heldout_reward",),
}


class Target:
    """The level a series crosses when its check calls the failure critical, its direction
    and the scales it is fitted on."""

    __slots__ = ("level", "rising", "scales")

    def __init__(self, level: float, rising: bool, scales: tuple[str, ...]) -> None:
        self.level = level
        self.rising = rising
        self.scales = scales


def target(
    kind: str, indicator: str, evidence: Mapping[str, Any], cfg: EngineConfig
) -> Target | None:
    """The critical level of an incident's series, from the rule of its check and the
    numbers in its evidence (None for a kind that is not projected)."""
    ev = evidence
    if kind == "entropy_collapse" and isinstance(ref := ev.get("reference"), float):
        # critical below the start x collapse_ratio once the reward has stopped rising, the
        # course of a collapse (streamwatch.checks.judge)
        ratio = cfg.entropy.collapse_ratio
        if indicator == "token_prob":  # watched as 1 - p: p rises towards 1
            return Target(1.0 - (1.0 - ref) * ratio, True, ("level", "log"))
        return Target(ref * ratio, False, ("level", "log"))
    if kind == "length_explosion" and isinstance(ref := ev.get("reference"), float):
        length = cfg.length  # critical at its start x explosion_ratio; the cap caps it
        level = ref * length.explosion_ratio
        if length.max_response_length is not None:
            level = min(level, length.max_response_length * length.cap_fraction)
        return Target(level, True, ("level", "log"))
    if kind == "truncation_saturation" and indicator == "truncation_ratio":
        length = cfg.length  # critical from the first step at the absolute level
        warmed = "baseline" in ev
        level = length.truncation_critical if warmed else length.truncation_absolute_critical
        return Target(level, True, ("probit",))
    if kind == "reward_hacking" and isinstance(ref := ev.get("heldout_reference"), float):
        # critical when the held-out's fall passes 6x the smallest fall that counts
        return Target(ref - 6 * cfg.hacking.drop, False, ("evaluations",))
    return None
