"""Downsampling that keeps spikes: M4 aggregation plus the steps that must stay.

A line chart ``w`` pixels wide can show at most ``w`` columns; within one column the eye sees
the first, last, lowest and highest value. M4 (Jugel et al., "M4: a visualization-oriented
time series data aggregation", VLDB 2014) keeps exactly those four points per step bucket,
so the drawn line is the one the full series would give at that width: a one-step spike is
never averaged away. On top of that the first non-finite value of each bucket (drawn as a
gap) and every step in ``keep`` (incident steps) are kept.

>>> import numpy as np
>>> steps = np.arange(10_000)
>>> values = np.zeros(10_000)
>>> values[6_543] = 50.0
>>> s, v = downsample(steps, values, max_points=400)
>>> len(s) <= 400, float(v.max()), int(s[v.argmax()])
(True, 50.0, 6543)
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

__all__ = ["downsample", "m4_indices"]

IndexArray = npt.NDArray[np.intp]


def m4_indices(
    steps: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
    max_points: int,
    keep: Iterable[int] = (),
) -> IndexArray:
    """Indices (ascending) of the points to draw: at most ``max_points`` plus the kept steps.

    ``steps`` must be ascending. Buckets are equal step ranges (so sparse stretches stay
    sparse); each contributes its first, last, minimum and maximum finite point and its
    first non-finite point.
    """
    n = len(steps)
    if max_points < 4:
        raise ValueError(f"max_points must be >= 4, got {max_points}")
    if n <= max_points:
        return np.arange(n, dtype=np.intp)
    finite = np.isfinite(values)
    buckets = max(1, max_points // (4 if finite.all() else 5))
    lo, hi = int(steps[0]), int(steps[-1])
    width = (hi - lo + 1) / buckets
    bucket = np.minimum(((steps - lo) / width).astype(np.intp), buckets - 1)
    new = np.r_[True, bucket[1:] != bucket[:-1]]
    starts = np.flatnonzero(new)
    group = np.cumsum(new) - 1
    chosen = [starts, np.r_[starts[1:], n] - 1]
    if finite.any():
        low = np.where(finite, values, np.inf)
        high = np.where(finite, values, -np.inf)
        chosen.append(_arg_reduce(low, group, starts, np.minimum))
        chosen.append(_arg_reduce(high, group, starts, np.maximum))
    if not finite.all():
        bad = np.flatnonzero(~finite)
        _, first_bad = np.unique(group[bad], return_index=True)
        chosen.append(bad[first_bad])
    kept = np.asarray(sorted(set(keep)), dtype=np.int64)
    if len(kept):
        chosen.append(np.flatnonzero(np.isin(steps, kept)).astype(np.intp))
    out: IndexArray = np.unique(np.concatenate(chosen))
    return out


def _arg_reduce(
    x: npt.NDArray[np.float64],
    group: IndexArray,
    starts: IndexArray,
    op: np.ufunc,
) -> IndexArray:
    """Index of the first point of each group where ``x`` equals the group's op-reduction."""
    best = op.reduceat(x, starts)
    hit = np.flatnonzero(x == best[group])
    _, first = np.unique(group[hit], return_index=True)
    out: IndexArray = hit[first]
    return out


def downsample(
    steps: npt.NDArray[np.int64],
    values: npt.NDArray[np.float64],
    max_points: int,
    keep: Iterable[int] = (),
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """The points :func:`m4_indices` keeps, as (steps, values)."""
    idx = m4_indices(steps, values, max_points, keep)
    return steps[idx], values[idx]
