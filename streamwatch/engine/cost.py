"""What an incident costs: the compute a run has spent since the incident began.

GPU-hours since the onset = steps since the onset x the run's own step time x its GPUs.

- The step time is the mean time of those steps, as the run's step-time metric logged them
  (verl ``timing_s/step``, TRL ``step_time``, OpenRLHF, slime, prime-rl, ROLL: the
  ``step_time`` indicator; a value logged every n steps stands for each of them), else as its
  events' timestamps space them. The time elapsed by step is kept at a bounded number of
  points (:class:`Clock`). An incident just raised has no steps yet: it gives the step time
  now, the mean of the newest ``window`` values (or the timestamps' spacing over as many
  steps), which is also what a step the clock has not reached yet is counted at.
- The GPUs are, first found: an event tag (``gpus``, ``n_gpus``, ``num_gpus`` or
  ``world_size``), ``engine.cost.gpus`` in the config, verl's own performance metrics (it logs
  ``perf/throughput`` = ``perf/total_num_tokens`` / (``perf/time_per_step`` x GPUs)), or the
  processes seen publishing (two or more: each rank drives a GPU; a run heard from one
  process only says nothing about its GPUs).
- The onset is the incident's ``onset_step`` when the check estimated one, else the step at
  which it first fired.

The engine keeps a :class:`CostMeter` per run (bounded: two short windows and a few numbers)
and prices an incident only when it is raised, updated or resolved (:meth:`CostMeter.price`);
the result is the incident's ``cost`` field, plain JSON. :func:`describe_cost` says it.

>>> meter = CostMeter(gpus=None)
>>> for step in range(1, 101):
...     meter.observe(step, None)
...     meter.timed(30.0, step)
>>> cost = meter.price(since=40, until=100, sources=8)
>>> cost["steps"], cost["step_seconds"], cost["gpus"], cost["gpu_hours"]
(60, 30.0, 8, 4.0)
>>> describe_cost("entropy_collapse", cost)
'~4.0 GPU-hours since entropy collapsed at step 40 (60 steps x 30 s x 8 GPUs)'
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping
from typing import Any, Final

from mypy_extensions import mypyc_attr

from streamwatch.detectors.window import DoubleRing

__all__ = ["GPU_TAGS", "CostMeter", "describe_cost", "describe_spent", "since_phrase"]

#: Event tags that give a run's GPU count, in this order.
GPU_TAGS: Final = ("gpus", "n_gpus", "num_gpus", "world_size")
#: verl's performance metrics, from which its GPU count follows.
_VERL_TOKENS: Final = "perf/total_num_tokens"
_VERL_THROUGHPUT: Final = "perf/throughput"
_VERL_TIME: Final = "perf/time_per_step"
#: events of a run whose metrics are searched for verl's performance metrics
_PROBES: Final = 20
#: points a clock keeps (the newest step besides)
_POINTS: Final = 256

#: what happened at the onset, per kind, for "~37 GPU-hours since entropy collapsed at step 812"
_SINCE: Final = {
    "entropy_collapse": "entropy collapsed",
    "entropy_blowup": "entropy blew up",
    "reward_chaos": "the reward turned chaotic",
    "reward_collapse": "the reward collapsed",
    "length_explosion": "response length exploded",
    "truncation_saturation": "truncation took over",
    "length_collapse": "response length collapsed",
    "reward_hacking": "held-out began to fall",
    "nonfinite_metric": "metrics went non-finite",
    "metric_spike": "the spikes began",
    "run_stalled": "the run stalled",
    "rank_straggler": "a rank began to straggle",
    "metric_drift": "the metric drifted",
    "no_learning_signal": "the learning signal vanished",
    "policy_mismatch": "the rollout/train mismatch grew",
    "user_rule": "the rule began to hold",
}


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Clock:
    """Seconds elapsed by step, at a bounded number of points: every ``stride`` steps, the
    stride doubling (every other point dropped) whenever more than ``_POINTS`` are kept; the
    newest step exactly. Between points the time is interpolated linearly."""

    __slots__ = ("elapsed", "points", "step", "stride")

    def __init__(self) -> None:
        self.points: list[tuple[int, float]] = []
        self.stride = 1
        self.step = -1  # the newest step, and the seconds elapsed at its end
        self.elapsed = 0.0

    def add(self, step: int, elapsed: float) -> None:
        if step <= self.step:
            return
        self.step, self.elapsed = step, elapsed
        if not self.points or step - self.points[-1][0] >= self.stride:
            self.points.append((step, elapsed))
            if len(self.points) > _POINTS:
                self.points = self.points[::2]
                self.stride *= 2

    def at(self, step: int) -> float | None:
        """The seconds elapsed at ``step`` (None before the first step kept; the newest's
        for a step after it)."""
        pts = self.points
        if not pts or step < pts[0][0]:
            return None
        if step >= self.step:
            return self.elapsed
        i = bisect_right(pts, (step, math.inf)) - 1
        s0, e0 = pts[i]
        s1, e1 = pts[i + 1] if i + 1 < len(pts) else (self.step, self.elapsed)
        return e0 if s1 == s0 else e0 + (e1 - e0) * (step - s0) / (s1 - s0)

    def clear(self) -> None:
        self.points.clear()
        self.stride, self.step, self.elapsed = 1, -1, 0.0


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class CostMeter:
    """One run's step times and GPU count, for pricing its incidents.

    ``observe`` is called for every event (one comparison; a step's first event also notes
    its time), ``timed`` for every judged value of the step-time metric, ``tagged`` for
    events with tags and ``probe`` for the first events' metrics; ``price`` only when an
    incident is announced.
    """

    __slots__ = (
        "_gpus",
        "_gpus_from",
        "newest",
        "probes",
        "timed_by",
        "times",
        "wall",
        "window",
        "work",
    )

    def __init__(self, gpus: int | None, window: int = 32) -> None:
        self._gpus = gpus
        self._gpus_from = "config" if gpus is not None else ""
        # the step-time metric's newest values, a ring of doubles made at its first value (a
        # deque takes 760 bytes however few; a list shifts them all at each value once full)
        self.times: DoubleRing | None = None
        self.window = window
        self.timed_by = ""  # the step-time metric's name
        self.work = Clock()  # the step-time metric's values, added up
        self.wall = Clock()  # the events' timestamps
        self.newest = -1  # the run's newest step
        self.probes = _PROBES

    def observe(self, step: int, ts: float | None) -> None:
        if step > self.newest:
            self.newest = step
            if ts is not None:
                self.wall.add(step, ts)

    def restart(self, step: int) -> None:
        """The run resumed from a checkpoint at ``step``: its steps count again from there."""
        self.newest = step
        self.wall.clear()
        self.work.clear()

    def timed(self, seconds: float, step: int, metric: str = "") -> None:
        """The step-time metric's value at ``step``: the time of each step since the last
        one it was logged at (a framework that logs every 10 steps logs their mean)."""
        if not seconds > 0.0 or step <= self.work.step:
            return
        if self.times is None:
            self.times = DoubleRing(max(self.window, 1))
        self.times.put(seconds)
        self.timed_by = metric
        steps = step - self.work.step if self.work.step >= 0 else 1
        self.work.add(step, self.work.elapsed + seconds * steps)

    def tagged(self, tags: Mapping[str, str]) -> None:
        """An event's tags: a GPU count there is the run's own word (it wins over the rest)."""
        if self._gpus_from == "tag":
            return
        for key in GPU_TAGS:
            n = _count(tags.get(key))
            if n is not None:
                self._gpus, self._gpus_from = n, f"tag {key}"
                return

    def probe(self, metrics: Mapping[str, float]) -> None:
        """One of the run's first events: verl's GPU count from its performance metrics."""
        self.probes -= 1
        tokens = metrics.get(_VERL_TOKENS)
        if tokens is None or self._gpus_from.startswith(("tag", "config")):
            return
        rate, seconds = metrics.get(_VERL_THROUGHPUT), metrics.get(_VERL_TIME)
        if rate is None or seconds is None or not rate * seconds > 0.0:
            return
        n = tokens / (rate * seconds)
        if math.isfinite(n) and n >= 0.5 and abs(n - round(n)) <= 0.05 * n:
            self._gpus, self._gpus_from = round(n), "verl perf/throughput"
            self.probes = 0

    def step_seconds(self) -> tuple[float, str] | None:
        """The run's step time now and where it comes from: the mean of the step-time
        metric's newest values, else the timestamps' spacing over as many steps; None when
        nothing times the run."""
        if self.times is not None:
            times = self.times.lane()  # oldest first: summed in the order they came
            return sum(times) / len(times), self.timed_by or "step time"
        wall = self.wall
        if wall.points and wall.step > wall.points[0][0]:
            first = max(wall.step - (self.window or 1), wall.points[0][0])
            start = wall.at(first)
            if start is not None and wall.elapsed > start:
                return (wall.elapsed - start) / (wall.step - first), "event timestamps"
        return None

    def _spent(self, since: int, until: int, rate: float) -> tuple[float, str] | None:
        """The seconds of steps ``since`` + 1 .. ``until`` by the step-time metric, else by
        the timestamps (a step the clock has not reached yet at the current rate)."""
        for clock, name in ((self.work, self.timed_by or "step time"), (self.wall, "")):
            start = clock.at(since)
            if start is None or clock.step < 0:
                continue
            end = clock.at(min(until, clock.step))
            if end is None:
                continue
            seconds = end - start + max(until - clock.step, 0) * rate
            if seconds > 0.0:
                return seconds, name or "event timestamps"
        return None

    def gpus(self, sources: int) -> tuple[int | None, str]:
        if self._gpus is not None:
            return self._gpus, self._gpus_from
        if sources >= 2:
            return sources, "processes seen"
        return None, ""

    def price(self, since: int, until: int, sources: int) -> dict[str, Any] | None:
        """The compute from step ``since`` to step ``until``; None when the run is not timed.

        ``sources``: the processes the run has been heard from."""
        timing = self.step_seconds()
        if timing is None:
            return None
        seconds, timed_by = timing
        steps = max(until - since, 0)
        spent = self._spent(since, until, seconds) if steps else None
        if spent is not None:  # the steps' own times, added up
            seconds, timed_by = spent[0] / steps, spent[1]
        gpus, gpus_from = self.gpus(sources)
        hours = steps * seconds / 3600.0
        return {
            "since_step": since,
            "until_step": until,
            "steps": steps,
            "step_seconds": _round(seconds),
            "step_time_from": timed_by,
            "gpus": gpus,
            "gpus_from": gpus_from,
            "hours": _round(hours),
            "gpu_hours": None if gpus is None else _round(hours * gpus),
        }

    @staticmethod
    def price_seconds(cost: dict[str, Any], seconds: float) -> dict[str, Any]:
        """``cost`` for a run that spent ``seconds`` without a step (it hung: the GPUs are
        held all the same)."""
        hours = seconds / 3600.0
        gpus = cost.get("gpus")
        out = dict(cost, steps=0, silent_seconds=_round(seconds), hours=_round(hours))
        out["gpu_hours"] = None if gpus is None else _round(hours * int(gpus))
        return out


def _count(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        n = int(value.strip())
    except ValueError:
        return None
    return n if n >= 1 else None


def _round(x: float) -> float:
    """Four significant digits: what a person reads, and the same on every machine."""
    return float(f"{x:.4g}")


def _amount(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:.2g}" if x < 1 else f"{x:.1f}"


def since_phrase(kind: str) -> str:
    return _SINCE.get(kind, f"{kind} began")


def _terms(cost: Mapping[str, Any]) -> str:
    gpus = cost.get("gpus")
    tail = f" x {gpus} GPUs" if gpus is not None else ""
    silent = cost.get("silent_seconds")
    if silent is not None:
        return f"{float(silent):,.0f} s silent{tail}"
    seconds = float(cost["step_seconds"])
    each = f"{seconds:.3g} s"
    steps = int(cost["steps"])
    return f"{steps:,} step{'' if steps == 1 else 's'} x {each}{tail}"


def describe_cost(kind: str, cost: Mapping[str, Any] | None) -> str | None:
    """One plain sentence for an incident's ``cost`` field (None when there is none)."""
    if not cost:
        return None
    since = f"since {since_phrase(kind)} at step {cost['since_step']:,}"
    gpu_hours = cost.get("gpu_hours")
    if not cost["steps"] and cost.get("silent_seconds") is None:
        # just raised: what each step of it costs
        seconds = float(cost["step_seconds"])
        gpus = cost.get("gpus")
        if gpus is None:
            return f"{seconds:.3g} s a step {since} (GPU count unknown)"
        each = seconds * int(gpus) / 3600.0
        return f"burning ~{each:.2g} GPU-hours a step {since} ({seconds:.3g} s x {gpus} GPUs)"
    if gpu_hours is None:
        hours = float(cost["hours"])
        return (
            f"~{_amount(hours)} hours of training {since} ({_terms(cost)}; GPU count unknown: "
            "set engine.cost.gpus or tag the events with gpus)"
        )
    return f"~{_amount(float(gpu_hours))} GPU-hours {since} ({_terms(cost)})"


def describe_spent(cost: Mapping[str, Any] | None) -> str | None:
    """A run's compute after its first critical incident, in one sentence."""
    if not cost:
        return None
    after = f"after its first critical incident (step {cost['since_step']:,})"
    gpu_hours = cost.get("gpu_hours")
    if gpu_hours is None:
        return f"~{_amount(float(cost['hours']))} hours of training {after}, GPU count unknown"
    return f"~{_amount(float(gpu_hours))} GPU-hours spent {after} ({_terms(cost)})"
