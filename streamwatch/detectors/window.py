"""Bounded windows of recent values: robust statistics, and the newest (step, value) pairs."""

from __future__ import annotations

import math
from array import array
from typing import Any, cast

from mypy_extensions import i64, mypyc_attr


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Window:
    """The last ``size`` finite values; median and a robust sd (1.4826 x MAD).

    The values are also kept in order (one insertion and one removal by bisection per
    update), so the median is a look-up and the absolute deviations from it come out as two
    sorted runs, which one linear merge orders: checks ask for these on every value.

    >>> w = Window(5)
    >>> for x in [1.0, 2.0, 3.0, 100.0, 2.0]: w.update(x)
    >>> w.median(), w.full
    (2.0, True)
    """

    __slots__ = ("head", "ordered", "size", "values")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = size
        # in arrival order, a ring (:func:`ring_put`), its oldest at ``head`` once full
        self.values: list[float] = []
        self.head = 0
        self.ordered: list[float] = []

    def update(self, x: float) -> None:
        if x - x != 0.0:  # nan or inf
            return
        values = self.values
        ordered = self.ordered
        # one float object for both lists (compiled, a double is boxed at each store: so
        # the ring is kept here, not by ring_put, whose float parameter would box it anew)
        boxed: Any = x
        if len(values) == self.size:
            head = self.head
            ordered.pop(_place(ordered, values[head]))  # the oldest leaves
            values[head] = boxed
            self.head = head + 1 if head + 1 < self.size else 0
        else:
            values.append(boxed)
        ordered.insert(_after(ordered, x), boxed)

    @property
    def full(self) -> bool:
        return len(self.values) == self.size

    def __len__(self) -> int:
        return len(self.values)

    def arrived(self) -> list[float]:
        """The values kept, oldest first."""
        return ring_oldest_first(self.values, self.head)

    def median(self) -> float:
        return sorted_median(self.ordered)

    def robust_sd(self) -> float:
        """1.4826 x the median absolute deviation: the sd for Gaussian noise, blind to spikes."""
        return self.median_and_sd()[1]

    def median_and_sd(self) -> tuple[float, float]:
        """Median and robust sd together; NaN while too few values."""
        ordered = self.ordered
        m = sorted_median(ordered)
        return m, robust_sd_sorted(ordered, m)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class DoubleRing:
    """The last ``size`` values of a series (of each of its ``lanes``) in a ring of doubles: 8
    bytes a value, where a list takes 32 (a pointer and a float object). It is written
    through a memoryview: compiled, a store through it takes the float as it is, where the
    array's own parses a format string each value. For rings written once a step of one
    series and read when something is judged; the rings every value goes through are lists
    (a store into a list costs less still).

    >>> r = DoubleRing(3)
    >>> for x in [1.0, 2.0, 3.0, 4.0]:
    ...     r.put(x)
    >>> r.lane(), len(r)
    ([2.0, 3.0, 4.0], 3)
    >>> import pickle
    >>> pickle.loads(pickle.dumps(r)).lane()
    [2.0, 3.0, 4.0]
    """

    __slots__ = ("head", "n", "ring", "size", "view")

    def __init__(self, size: int, lanes: int = 1) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = size
        self.ring = array("d", bytes(8 * size * lanes))  # lane k: [k * size, (k + 1) * size)
        self.view = _doubles(self.ring)
        self.n = 0  # values kept (in each lane)
        self.head = 0  # the oldest's place, once the ring is full

    def _next(self) -> int:
        """Where the next value goes: a new place while the ring is not full, else the
        oldest's."""
        n = self.n
        if n < self.size:
            self.n = n + 1
            return n
        head = self.head
        self.head = head + 1 if head + 1 < n else 0
        return head

    def put(self, x: float) -> None:
        self.view[self._next()] = x

    def clear(self) -> None:
        self.n = self.head = 0

    def __len__(self) -> int:
        return self.n

    def lane(self, k: int = 0) -> list[float]:
        """The values of lane ``k``, oldest first."""
        ring, n, head, at = self.ring, self.n, self.head, k * self.size
        if n < self.size:
            return ring[at : at + n].tolist()
        return ring[at + head : at + n].tolist() + ring[at : at + head].tolist()

    # a snapshot keeps the ring; the view over it is made anew
    def __getstate__(self) -> dict[str, Any]:
        return {"head": self.head, "n": self.n, "ring": self.ring, "size": self.size}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.head, self.n, self.ring, self.size = (
            state["head"],
            state["n"],
            state["ring"],
            state["size"],
        )
        self.view = _doubles(self.ring)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Recent(DoubleRing):
    """The newest ``size`` (step, value) pairs of a series, oldest first, in two lanes of a
    ring of doubles: what a projection fits when an incident is raised.

    >>> r = Recent(3)
    >>> for step in range(1, 6):
    ...     r.add(step, step / 10)
    >>> r.steps(), r.values(), len(r)
    ([3.0, 4.0, 5.0], [0.3, 0.4, 0.5], 3)
    >>> import pickle
    >>> pickle.loads(pickle.dumps(r)).values()
    [0.3, 0.4, 0.5]
    """

    __slots__ = ()

    def __init__(self, size: int) -> None:
        super().__init__(size, 2)

    def add(self, step: int, x: float) -> None:
        i = self._next()
        view = self.view
        view[i] = float(step)
        view[self.size + i] = x

    def steps(self) -> list[float]:
        return self.lane(0)

    def values(self) -> list[float]:
        return self.lane(1)


def _doubles(ring: array[float]) -> memoryview[float]:
    """A view that stores into ``ring`` (see :class:`DoubleRing`)."""
    return cast("memoryview[float]", memoryview(ring))


def sorted_median(ordered: list[float]) -> float:
    """The median of values in ascending order (NaN if there are none), as
    ``statistics.median`` gives it.

    >>> sorted_median([1.0, 2.0, 4.0, 7.0]), sorted_median([3.0])
    (3.0, 3.0)
    """
    n = len(ordered)
    if n % 2:
        return ordered[n // 2]
    return (ordered[n // 2 - 1] + ordered[n // 2]) / 2 if n else math.nan


def robust_sd_sorted(ordered: list[float], m: float) -> float:
    """1.4826 x the median absolute deviation from ``m`` (their median) of values in
    ascending order; NaN with fewer than two.

    >>> robust_sd_sorted([1.0, 2.0, 4.0, 7.0], 3.0)
    2.2239
    """
    return 1.4826 * _deviation_median(ordered, m) if len(ordered) >= 2 else math.nan


def ring_put(ring: list[float], head: i64, size: i64, x: float) -> i64:
    """Keep ``x`` in ``ring``, a list used as a ring of ``size`` values whose oldest is at
    ``head`` once it is full: appended while it is not, else in the oldest's place. Gives the
    new ``head``. (A native list is indexed and stored into without a method call in the
    compiled build; a deque is not.)

    >>> ring: list[float] = []
    >>> head = 0
    >>> for x in [1.0, 2.0, 3.0, 4.0]:
    ...     head = ring_put(ring, head, 3, x)
    >>> ring, head, ring_oldest_first(ring, head)
    ([4.0, 2.0, 3.0], 1, [2.0, 3.0, 4.0])
    """
    if len(ring) < size:
        ring.append(x)
        return head
    ring[head] = x
    return head + 1 if head + 1 < size else 0


def ring_oldest_first(ring: list[float], head: int) -> list[float]:
    """The values of a ring kept by :func:`ring_put`, oldest first."""
    return ring[head:] + ring[:head]


def _place(ordered: list[float], x: float) -> int:
    """The first place in ``ordered`` whose value is not below ``x`` (``bisect_left``, written
    out: compiled, it compares doubles, where the C function compares Python objects).

    >>> _place([1.0, 2.0, 2.0, 3.0], 2.0), _place([1.0, 2.0], 5.0), _place([], 1.0)
    (1, 2, 0)
    """
    lo: i64 = 0  # native integers, compiled: no tagged-int arithmetic a probe
    hi: i64 = len(ordered)
    while lo < hi:
        mid = (lo + hi) >> 1
        if ordered[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _after(ordered: list[float], x: float) -> int:
    """The first place in ``ordered`` whose value is above ``x`` (``bisect_right``).

    >>> _after([1.0, 2.0, 2.0, 3.0], 2.0)
    3
    """
    lo: i64 = 0
    hi: i64 = len(ordered)
    while lo < hi:
        mid = (lo + hi) >> 1
        if x < ordered[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _deviation_median(ordered: list[float], m: float) -> float:
    """The median of ``|v - m|`` over sorted values: below ``m`` the deviations rise going
    down, above it going up, so a walk outwards from ``m`` meets them in order and stops
    half-way (``m - v`` is exactly ``abs(v - m)``: rounding is symmetric).

    >>> _deviation_median([1.0, 2.0, 4.0, 7.0], 3.0)
    1.5
    """
    n: i64 = len(ordered)
    above: i64 = _place(ordered, m)
    below = above - 1
    prev = cur = 0.0
    _i: i64  # a native count
    for _i in range(n // 2 + 1):
        if above < n and (below < 0 or ordered[above] - m <= m - ordered[below]):
            prev, cur = cur, ordered[above] - m
            above += 1
        else:
            prev, cur = cur, m - ordered[below]
            below -= 1
    return cur if n % 2 else (prev + cur) / 2
