"""Bounded windows of recent values: robust statistics, and the newest (step, value) pairs.

One module because the windows, the rings and the functions on ascending doubles share one
representation (vectors of doubles) and its two forms, compiled and interpreted.
"""

from __future__ import annotations

import copyreg
import math
from bisect import bisect_left, insort
from collections.abc import Callable
from types import FunctionType
from typing import Final

from librt.vecs import append, vec
from mypy_extensions import i64, mypyc_attr


def _probe() -> None:
    """A function of this module: a Python function unless the module is compiled."""


#: True when this module runs interpreted (the pure build, or the source beside the
#: compiled build): there, a few hot paths take C functions of the standard library where
#: the compiled build loops over doubles
INTERPRETED: Final = isinstance(_probe, FunctionType)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Window:
    """The last ``size`` finite values; median and a robust sd (1.4826 x MAD).

    The values are also kept in order (the newest takes the oldest's place by bisection and
    a shift), so the median is a look-up and the absolute deviations from it come out as two
    sorted runs, which one linear merge orders: checks ask for these on every value. Both
    hold doubles (a :class:`DoubleRing` and a ``vec[float]``): compiled, no float object a
    value. Interpreted, the values in order are a list, kept so by the C functions of
    ``bisect`` (a loop over a vector is many times slower there), and the vector is made from
    it when :meth:`ascending` is asked for.

    >>> w = Window(5)
    >>> for x in [1.0, 2.0, 3.0, 100.0, 2.0, 0.5]: w.update(x)
    >>> w.median(), w.full, list(w.ascending()), w.arrived()
    (2.0, True, [0.5, 2.0, 2.0, 3.0, 100.0], [2.0, 3.0, 100.0, 2.0, 0.5])
    >>> import pickle
    >>> pickle.loads(pickle.dumps(w)).arrived()
    [2.0, 3.0, 100.0, 2.0, 0.5]
    """

    __slots__ = ("_ordered", "_sorted", "_stale", "size", "values")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = size
        self.values = DoubleRing(size)  # in arrival order
        self._ordered: vec[float] = vec[float](capacity=size)
        self._sorted: list[float] = []  # interpreted: the values in order
        self._stale = False  # interpreted: _ordered is not _sorted yet

    def update(self, x: float) -> None:
        if x - x != 0.0:  # nan or inf
            return
        values = self.values
        if INTERPRETED:
            kept = self._sorted
            if values.n == values.size:
                del kept[bisect_left(kept, values.swap(x))]
            else:
                values.put(x)
            insort(kept, x)  # after its equals, as below
            self._stale = True
            return
        ordered = self._ordered
        if values.full:  # x takes the oldest's place, in both
            i = _place(ordered, values.oldest())
            values.put(x)
            j = _after(ordered, x)
            if j > i:  # the values between them move down one
                for k in range(i, j - 1):
                    ordered[k] = ordered[k + 1]
                ordered[j - 1] = x
            else:  # up one
                for k in range(i, j, -1):
                    ordered[k] = ordered[k - 1]
                ordered[j] = x
            return
        values.put(x)
        self._ordered = insert(ordered, x)

    @property
    def full(self) -> bool:
        return self.values.n == self.size  # not the ring's property: a call fewer

    def __len__(self) -> int:
        return self.values.n

    def arrived(self) -> list[float]:
        """The values kept, oldest first."""
        return self.values.lane()

    def ascending(self) -> vec[float]:
        """The values kept, in ascending order."""
        if INTERPRETED and self._stale:
            self._ordered = _FLOATS(self._sorted)
            self._stale = False
        return self._ordered

    def median(self) -> float:
        if INTERPRETED:
            return _list_median(self._sorted)
        return sorted_median(self._ordered)

    def robust_sd(self) -> float:
        """1.4826 x the median absolute deviation: the sd for Gaussian noise, blind to spikes."""
        return self.median_and_sd()[1]

    def median_and_sd(self) -> tuple[float, float]:
        """Median and robust sd together; NaN while too few values."""
        ordered = self.ascending()
        m = sorted_median(ordered)
        return m, robust_sd_sorted(ordered, m)


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class DoubleRing:
    """The last ``size`` values of a series (of each of its ``lanes``) in a ring of doubles
    (``librt``'s ``vec[float]``): 8 bytes a value, where a list takes 40 (a pointer and a
    float object). Compiled, a value is stored and read as a double: no float object is made
    or freed.

    >>> r = DoubleRing(3)
    >>> for x in [1.0, 2.0, 3.0, 4.0]:
    ...     r.put(x)
    >>> r.lane(), len(r), r.full, r.oldest(), r.newest(), r.mean()
    ([2.0, 3.0, 4.0], 3, True, 2.0, 4.0, 3.0)
    >>> import pickle
    >>> pickle.loads(pickle.dumps(r)).lane()
    [2.0, 3.0, 4.0]
    """

    __slots__ = ("head", "n", "ring", "size")

    def __init__(self, size: int, lanes: int = 1) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size: i64 = size
        self.ring: vec[float] = vec[float]([0.0] * (size * lanes))  # lane k: [k * size, ...)
        self.n: i64 = 0  # values kept (in each lane)
        self.head: i64 = 0  # the oldest's place, once the ring is full

    def place(self) -> i64:
        """Where the next value goes (of each lane, to be stored there): a new place while
        the ring is not full, else the oldest's, which it replaces."""
        n = self.n
        if n < self.size:
            self.n = n + 1
            return n
        head = self.head
        # statements, not a conditional expression: compiled, ``x if c else 0`` joins i64
        # with int and boxes the result
        if head + 1 < n:
            self.head = head + 1
        else:
            self.head = 0
        return head

    def put(self, x: float) -> None:
        # place() and swap() written out: no call on every value, interpreted
        n = self.n
        if n < self.size:
            self.ring[n] = x
            self.n = n + 1
            return
        head = self.head
        self.ring[head] = x
        if head + 1 < n:  # statements: see place()
            self.head = head + 1
        else:
            self.head = 0

    def swap(self, x: float) -> float:
        """A full ring: ``x`` takes the oldest's place (of lane 0); the oldest returned."""
        head = self.head
        ring = self.ring
        oldest = ring[head]
        ring[head] = x
        if head + 1 < self.n:  # statements: see place()
            self.head = head + 1
        else:
            self.head = 0
        return oldest

    def clear(self) -> None:
        self.n = self.head = 0

    def __len__(self) -> int:
        return self.n

    @property
    def full(self) -> bool:
        return self.n == self.size

    def oldest(self) -> float:
        """The oldest value kept (of lane 0; 0.0 while empty)."""
        return self.ring[self.head]

    def newest(self) -> float:
        """The newest value kept (of lane 0; NaN while empty)."""
        if self.n == 0:
            return math.nan
        i = (self.head if self.n == self.size else self.n) - 1
        return self.ring[i if i >= 0 else self.size - 1]

    def mean(self) -> float:
        """The mean of the values kept (of lane 0; NaN while empty)."""
        ring, n = self.ring, self.n
        total = 0.0
        if INTERPRETED:  # the same sum, over a slice: read in C
            for x in ring[0:n]:
                total += x
        else:
            for i in range(n):
                total += ring[i]
        return total / float(n) if n else math.nan

    def middle(self, last: int) -> float:
        """The middle of the newest ``last`` values of lane 0 in ascending order (``last``
        odd, at most the values kept): ``ascending(last)[last // 2]``.

        >>> r = DoubleRing(6)
        >>> for x in [5.0, 1.0, 4.0, 2.0, 3.0, 9.0]:
        ...     r.put(x)
        >>> r.middle(5), r.middle(3)
        (3.0, 3.0)
        """
        if INTERPRETED:  # a C sort of a slice, without making a vector of it
            ring, size = self.ring, self.size
            end = self.head if self.n == size else self.n  # one past the newest
            start = end - last
            if start >= 0:
                return sorted(ring[start:end])[last // 2]
            return sorted(list(ring[start + size : size]) + list(ring[:end]))[last // 2]
        return self.ascending(last)[last // 2]

    def ascending(self, last: int = 0) -> vec[float]:
        """The values of lane 0 (its newest ``last``, when given) in ascending order, sorted
        as doubles (:func:`insert`: a ring holds a few dozen values at most).

        >>> r = DoubleRing(4)
        >>> for x in [5.0, 1.0, 4.0, 2.0, 3.0]:
        ...     r.put(x)
        >>> list(r.ascending()), list(r.ascending(last=2))
        ([1.0, 2.0, 3.0, 4.0], [2.0, 3.0])
        """
        ring, size, have = self.ring, self.size, self.n
        end = self.head if have == size else have  # one past the newest
        k = have if last <= 0 else min(last, have)
        if INTERPRETED:  # C's sort (stable, as insert is) of slices, then one vector
            start = end - k
            if start >= 0:
                return _FLOATS(sorted(ring[start:end]))
            return _FLOATS(sorted(list(ring[start + size : size]) + list(ring[:end])))
        out = vec[float](capacity=k)
        for i in range(end - k, end):
            out = insert(out, ring[i if i >= 0 else i + size])
        return out

    def highest(self, but: int = 0) -> float:
        """The highest value of lane 0 but its newest ``but`` (-inf if there is none).

        >>> r = DoubleRing(4)
        >>> for x in [5.0, 1.0, 4.0, 2.0, 3.0]:
        ...     r.put(x)
        >>> r.highest(), r.highest(but=3), r.highest(but=4)
        (4.0, 1.0, -inf)
        """
        ring, size, have = self.ring, self.size, self.n
        oldest = self.head if have == size else 0
        top = -math.inf
        for k in range(have - but):
            i = oldest + k
            x = ring[i if i < size else i - size]
            if x > top:
                top = x
        return top

    def at_most(self, x: float, but: int = 0) -> int:
        """How many values of lane 0 but its newest ``but`` are at most ``x`` (more than
        half of them: ``x`` is at or above their median).

        >>> r = DoubleRing(4)
        >>> for x in [5.0, 1.0, 4.0, 2.0, 3.0]:
        ...     r.put(x)
        >>> r.at_most(2.0), r.at_most(2.0, but=1)
        (2, 2)
        """
        ring, size, have = self.ring, self.size, self.n
        oldest = self.head if have == size else 0
        count = 0
        for k in range(have - but):
            i = oldest + k
            if ring[i if i < size else i - size] <= x:
                count += 1
        return count

    def ordered(self) -> vec[float]:
        """The values of lane 0, oldest first, as doubles (:meth:`lane` makes a float object
        of each).

        >>> r = DoubleRing(3)
        >>> for x in [1.0, 2.0, 3.0, 4.0]:
        ...     r.put(x)
        >>> list(r.ordered()) == r.lane()
        True
        """
        ring, n, size = self.ring, self.n, self.size
        start = self.head if n == size else 0
        if INTERPRETED:  # slices: copied in C
            if start == 0:
                return ring[0:n]
            return _FLOATS(list(ring[start:size]) + list(ring[0:start]))
        out = vec[float](capacity=n)
        for k in range(start, start + n):
            out = append(out, ring[k if k < size else k - size])
        return out

    def lane(self, k: int = 0) -> list[float]:
        """The values of lane ``k``, oldest first."""
        ring, n, head, at = self.ring, self.n, self.head, k * self.size
        if n < self.size:
            return [ring[i] for i in range(at, at + n)]
        return [ring[i] for i in range(at + head, at + n)] + [ring[i] for i in range(at, at + head)]


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
        i = self.place()
        ring = self.ring
        ring[i] = float(step)
        ring[self.size + i] = x

    def steps(self) -> list[float]:
        return self.lane(0)

    def values(self) -> list[float]:
        return self.lane(1)


#: more values than this are sorted by ``sorted`` (insertion shifts a quadratic number)
_FEW: Final = 64


def _floats(items: list[float]) -> vec[float]:
    return vec[float](items)


def _ints(items: list[int]) -> vec[i64]:
    return vec[i64](items)


def _reduce_floats(v: vec[float]) -> tuple[Callable[[list[float]], vec[float]], tuple[list[float]]]:
    return _floats, (list(v),)


def _reduce_ints(v: vec[i64]) -> tuple[Callable[[list[int]], vec[i64]], tuple[list[int]]]:
    return _ints, (list(v),)


#: the class of a vector of doubles, taken from an instance (compiled, ``i64`` outside a
#: function is ``int``; interpreted, ``vec[float]`` is a subscription at each use)
_FLOATS: Final = type(_floats([]))

# a vector pickles as the list of its values (snapshots of the run state hold them)
copyreg.pickle(_FLOATS, _reduce_floats)
copyreg.pickle(type(_ints([])), _reduce_ints)


def ascending(values: list[float]) -> vec[float]:
    """The values in ascending order, as the functions below take them.

    >>> list(ascending([3.0, 1.0, 2.0])), list(ascending([float(i % 7) for i in range(99)]))[-3:]
    ([1.0, 2.0, 3.0], [6.0, 6.0, 6.0])
    """
    if len(values) > _FEW or INTERPRETED:  # interpreted, C's sort is faster at any size
        return vec[float](sorted(values))
    ordered = vec[float](capacity=len(values))
    for x in values:
        ordered = insert(ordered, x)
    return ordered


def insert(ordered: vec[float], x: float) -> vec[float]:
    """``ordered`` (ascending) with ``x`` in its place, after its equals: the values above it
    shifted up one. Compiled, the few dozen values of a window or a reference are sorted so
    as doubles, without a float object or a comparison of objects.

    >>> list(insert(ascending([1.0, 2.0, 4.0]), 3.0))
    [1.0, 2.0, 3.0, 4.0]
    """
    ordered = append(ordered, x)
    j: i64 = len(ordered) - 1
    while j > 0 and ordered[j - 1] > x:
        ordered[j] = ordered[j - 1]
        j -= 1
    ordered[j] = x
    return ordered


def merged(first: vec[float], second: vec[float]) -> vec[float]:
    """Two ascending runs as one, in one linear pass; of equal values, ``first``'s come
    first (as a stable sort of ``first`` then ``second`` orders them).

    >>> list(merged(ascending([1.0, 4.0, 5.0]), ascending([2.0, 4.0, 9.0])))
    [1.0, 2.0, 4.0, 4.0, 5.0, 9.0]
    """
    n: i64 = len(first)
    m: i64 = len(second)
    out = vec[float](capacity=n + m)
    i: i64 = 0
    j: i64 = 0
    while i < n and j < m:
        if second[j] < first[i]:
            out = append(out, second[j])
            j += 1
        else:
            out = append(out, first[i])
            i += 1
    while i < n:
        out = append(out, first[i])
        i += 1
    while j < m:
        out = append(out, second[j])
        j += 1
    return out


def sorted_median(ordered: vec[float]) -> float:
    """The median of values in ascending order (NaN if there are none), as
    ``statistics.median`` gives it.

    >>> sorted_median(ascending([1.0, 2.0, 4.0, 7.0])), sorted_median(ascending([3.0]))
    (3.0, 3.0)
    """
    n = len(ordered)
    if n % 2:
        return ordered[n // 2]
    return (ordered[n // 2 - 1] + ordered[n // 2]) / 2 if n else math.nan


def _list_median(ordered: list[float]) -> float:
    """:func:`sorted_median` of a list (the interpreted build's window).

    >>> _list_median([1.0, 2.0, 4.0, 7.0]), _list_median([])
    (3.0, nan)
    """
    n = len(ordered)
    if n % 2:
        return ordered[n // 2]
    return (ordered[n // 2 - 1] + ordered[n // 2]) / 2 if n else math.nan


def robust_sd_sorted(ordered: vec[float], m: float) -> float:
    """1.4826 x the median absolute deviation from ``m`` (their median) of values in
    ascending order; NaN with fewer than two.

    >>> robust_sd_sorted(ascending([1.0, 2.0, 4.0, 7.0]), 3.0)
    2.2239
    """
    return 1.4826 * _deviation_median(ordered, m) if len(ordered) >= 2 else math.nan


def _place(ordered: vec[float], x: float) -> i64:
    """The first place in ``ordered`` whose value is not below ``x`` (``bisect_left``, written
    out: compiled, it compares doubles, where the C function compares Python objects).

    >>> _place(ascending([1.0, 2.0, 2.0, 3.0]), 2.0), _place(ascending([1.0, 2.0]), 5.0)
    (1, 2)
    >>> _place(ascending([]), 1.0)
    0
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


def _after(ordered: vec[float], x: float) -> i64:
    """The first place in ``ordered`` whose value is above ``x`` (``bisect_right``).

    >>> _after(ascending([1.0, 2.0, 2.0, 3.0]), 2.0)
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


def _deviation_median(ordered: vec[float], m: float) -> float:
    """The median of ``|v - m|`` over sorted values: below ``m`` the deviations rise going
    down, above it going up, so a walk outwards from ``m`` meets them in order and stops
    half-way (``m - v`` is exactly ``abs(v - m)``: rounding is symmetric).

    >>> _deviation_median(ascending([1.0, 2.0, 4.0, 7.0]), 3.0)
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
