"""A run's rule state: the recent values of the metrics its rules read, and each rule's steps
in a row held; at each event, the findings of the rules that held long enough and the names
of those that saw health.

A metric's values are kept one a step (the mean of the step's values when several processes
log it), at most as many as the largest window a rule asks of it (:data:`MAX_WINDOW`). Only
the metrics the rules read are kept; a rule none of whose metrics the run has logged is not
evaluated (it stays silent). A window not yet full is not known, and a condition that is not
known neither holds nor counts as health.

>>> from streamwatch.rules.config import RuleConfig
>>> rule = RuleConfig(name="low", expr="mean(r, 2) < 0.1", **{"for": 2})
>>> state = RuleState.of([Rule.of(rule)])
>>> for step, r in enumerate([0.5, 0.05, 0.05, 0.05, 0.5], start=1):
...     found, healthy = state.event(step, {"r": r, "other": 1.0})
...     print(step, [(f.indicator, f.severity.value, f.onset_step) for f in found], healthy)
1 [] []
2 [] ['low']
3 [] []
4 [('low', 'warning', 3)] []
5 [] ['low']
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from itertools import islice
from statistics import median
from typing import Any, Final

from streamwatch.engine.findings import Finding
from streamwatch.incidents import Kind, Severity
from streamwatch.rules.config import RuleConfig
from streamwatch.rules.grammar import MAX_WINDOW, Condition, Term, Value

__all__ = ["Rule", "RuleState", "Track"]

_USER_RULE: Final = Kind.USER_RULE


@dataclass(frozen=True, slots=True)
class Rule:
    """A rule as the engine runs it: its condition parsed once."""

    name: str
    condition: Condition
    for_: int
    after_step: int
    severity: Severity
    message: str
    remedy: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, cfg: RuleConfig) -> Rule:
        labels = tuple(sorted(cfg.labels.items()))
        return cls(
            cfg.name,
            cfg.condition,
            cfg.for_,
            cfg.after_step,
            cfg.severity,
            cfg.message,
            cfg.remedy,
            labels,
        )

    def words(self, value: Value, step: int) -> str:
        """The incident's message: the rule's own, filled in, or the condition that held."""
        metric = self.condition.metrics[0]
        if self.message:
            try:
                return self.message.format(value=value, metric=metric, step=step)
            except (ValueError, TypeError):  # a number's format given something else
                return self.message.format(value=str(value), metric=metric, step=step)
        shown = f"{value:.4g}" if isinstance(value, float) else str(value)
        held = f" for {self.for_} steps" if self.for_ > 1 else ""
        return f"rule {self.name}: {self.condition.text} held{held} (value {shown})"


@dataclass(slots=True)
class Track:
    """The values of one metric the rules read, one a step."""

    keep: int  # the values kept (the largest window)
    firsts: int  # the first values kept for start()
    values: deque[float] = field(init=False)
    first: list[float] = field(default_factory=list)
    step: int = -1  # the step of the newest value
    k: int = 0  # the values averaged into the newest
    best: float = -math.inf  # the largest value before the newest step's
    tick: int = 0  # the run's step count when last logged (0: never)
    logged: int = 0  # steps logged

    def __post_init__(self) -> None:
        self.values = deque(maxlen=min(self.keep, MAX_WINDOW))

    def add(self, step: int, x: float, tick: int) -> None:
        """A finite value of the metric at ``step`` (older steps are not kept)."""
        if step < self.step:
            return
        self.tick = tick
        if step == self.step:  # another process's value of the same step: the mean
            self.k += 1
            mean = self.values[-1] + (x - self.values[-1]) / self.k
            self.values[-1] = mean
            if self.logged <= self.firsts:
                self.first[-1] = mean
            return
        if self.values:
            self.best = max(self.best, self.values[-1])
        self.step, self.k = step, 1
        self.values.append(x)
        self.logged += 1
        if self.logged <= self.firsts:
            self.first.append(x)

    def read(self, fn: str, n: int, tick: int) -> Value:
        """The value of ``fn(metric, n)`` now; None while it is not known."""
        if fn == "missing":
            return tick - self.tick >= n
        if not self.values:
            return None
        newest = self.values[-1]
        if fn == "value":
            return newest
        if fn == "best":
            return max(self.best, newest)
        if fn == "drop_from_best":
            return max(self.best, newest) - newest
        if fn == "start":
            return sum(self.first[:n]) / n if len(self.first) >= n else None
        return _window(fn, self.values, n)


def _window(fn: str, values: deque[float], n: int) -> float | None:
    if len(values) < n:
        return None
    xs = list(islice(reversed(values), n))  # the newest n, not a copy of all that is kept
    xs.reverse()
    if fn == "mean":
        return sum(xs) / n
    if fn == "min":
        return min(xs)
    if fn == "max":
        return max(xs)
    if fn == "median":
        return float(median(xs))
    return _slope(xs)


def _slope(ys: list[float]) -> float:
    """The least-squares slope of ``ys`` per step (one value a step).

    >>> _slope([1.0, 3.0, 5.0])
    2.0
    """
    n = len(ys)
    mx = (n - 1) / 2
    my = sum(ys) / n
    sxx = sum((i - mx) ** 2 for i in range(n))
    return sum((i - mx) * (y - my) for i, y in enumerate(ys)) / sxx


@dataclass(slots=True)
class _Held:
    """One rule's course on a run."""

    streak: int = 0  # steps in a row it held
    before: int = 0  # the streak before the newest step
    since: int = -1  # the first step of the streak
    last: int = -1  # the newest step it was evaluated at
    bound: bool = False  # the run has logged one of its metrics


@dataclass(slots=True)
class _Reader:
    """The terms of one evaluation, read from the tracks and noted as evidence."""

    tracks: dict[str, Track]
    tick: int
    texts: dict[Term, str]
    seen: dict[str, Value] = field(default_factory=dict)

    def read(self, term: Term) -> Value:
        x = self.tracks[term.metric].read(term.fn, term.n, self.tick)
        self.seen[self.texts[term]] = x
        return x


@dataclass
class RuleState:
    """One run's state of every rule: pickled with the run's snapshot."""

    rules: tuple[Rule, ...]
    tracks: dict[str, Track]
    held: list[_Held]
    newest: int = -1  # the run's newest step
    tick: int = 0  # the run's steps so far
    #: each term's text, the key of its value in the evidence (written once)
    texts: dict[Term, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for rule in self.rules:
            self.texts.update((t, t.text()) for t in rule.condition.terms())

    @classmethod
    def of(cls, rules: tuple[Rule, ...] | list[Rule]) -> RuleState:
        keep: dict[str, int] = {}
        firsts: dict[str, int] = {}
        for rule in rules:
            for metric, n in rule.condition.windows().items():
                keep[metric] = max(keep.get(metric, 1), n)
            for metric, n in rule.condition.starts().items():
                firsts[metric] = max(firsts.get(metric, 0), n)
        tracks = {m: Track(n, firsts.get(m, 0)) for m, n in keep.items()}
        return cls(tuple(rules), tracks, [_Held() for _ in rules])

    def event(self, step: int, metrics: Mapping[str, float]) -> tuple[list[Finding], list[str]]:
        """After an event's values are in: the findings of the rules that held for long
        enough, and the rules that saw health (at the first event of a step)."""
        if step > self.newest:
            self.newest = step
            self.tick += 1
        for name, track in self.tracks.items():
            x = metrics.get(name)
            if x is not None and x - x == 0.0:  # finite
                track.add(step, x, self.tick)
        found: list[Finding] = []
        healthy: list[str] = []
        for rule, held in zip(self.rules, self.held, strict=True):
            if step <= rule.after_step or step < held.last:
                continue
            if not held.bound:
                held.bound = any(self.tracks[m].logged for m in rule.condition.metrics)
            if held.bound:
                self._evaluate(rule, held, step, found, healthy)
        return found, healthy

    def _evaluate(
        self, rule: Rule, held: _Held, step: int, found: list[Finding], healthy: list[str]
    ) -> None:
        reader = _Reader(self.tracks, self.tick, self.texts)
        verdict = rule.condition.eval(reader)
        new = step > held.last
        if new:
            held.before, held.last = held.streak, step
        if verdict is True:
            if held.before == 0:
                held.since = step
            held.streak = held.before + 1
        else:
            held.streak = 0
        if held.streak >= rule.for_:
            found.append(_finding(rule, held, step, reader.seen))
        elif verdict is False and new:
            healthy.append(rule.name)

    def remedies(self, name: str) -> list[str]:
        """What the rule ``name`` says to try."""
        return next((list(r.remedy) for r in self.rules if r.name == name), [])

    def restart(self, step: int) -> None:
        """The run resumed from a checkpoint at ``step``: its steps begin again there."""
        self.newest = min(self.newest, step - 1)
        for track in self.tracks.values():
            track.step = min(track.step, step - 1)
        for held in self.held:
            held.streak = held.before = 0
            held.last = min(held.last, step - 1)


def _finding(rule: Rule, held: _Held, step: int, read: dict[str, Value]) -> Finding:
    numbers = [x for x in read.values() if isinstance(x, float)]
    value: Value = numbers[0] if numbers else next(iter(read.values()), None)
    evidence: dict[str, Any] = dict(read)
    evidence["held_steps"] = held.streak
    if rule.labels:
        evidence["labels"] = dict(rule.labels)
    evidence["because"] = [f"the team's rule {rule.name}: {rule.condition.text}"]
    return Finding(
        _USER_RULE,
        rule.name,
        rule.condition.metrics[0],
        rule.severity,
        step,
        partial(rule.words, value, step),
        evidence,
        onset_step=held.since,
        rule="user",
    )
