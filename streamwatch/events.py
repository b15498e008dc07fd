"""The event contract: one process, one step, many metrics.

An event is what a training process publishes once per step::

    {"run_id": "grpo-7b", "step": 812, "ts": 1764460800.0,
     "metrics": {"actor/entropy": 0.08, "critic/score/mean": 0.93},
     "source": {"host": "node-3", "rank": 5}, "tags": {"exp": "clip-higher"}}

The single-metric form ``{"run_id", "step", "name", "value", ...}`` is accepted too.

Non-finite values are data, not errors: they arrive as float NaN/Infinity (what Python's
``json`` module writes), as strings (``"nan"``, ``"-inf"``) or as ``null`` and are all read as
floats here; the Monitor reports them. What cannot be read becomes a :class:`Problem` that
names where it came from, the run, the metric, the step and the value.

>>> ev, problems = decode_event({"run_id": "r", "step": 3, "metrics": {"loss": "nan", "x": "a"}})
>>> ev.metrics
{'loss': nan}
>>> problems[0].reason
"metric 'x' value 'a' is not a number"
>>> decode_event({"run_id": "r", "step": True, "metrics": {"loss": 1.0}})[1][0].reason
"'step' true is a boolean, not a step number"
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

from msgspec import Meta, Struct, structs
from pydantic import ValidationError

from streamwatch._event_model import MAX_STEP, RUN_ID_RULES, STEP_RULES
from streamwatch._event_model import Event as EventModel
from streamwatch.markers import FINISHED_METRIC, FINISHED_TAG, FINISHED_VALUE

__all__ = [
    "FINISHED_METRIC",
    "FINISHED_TAG",
    "FINISHED_VALUE",
    "MAX_STEP",
    "Event",
    "Problem",
    "Source",
    "decode_event",
    "finished_event",
    "is_finished",
    "source_key",
]

_MAX_TEXT = 200
_NONFINITE_WORDS = {
    "nan": math.nan,
    "+nan": math.nan,
    "-nan": math.nan,
    "inf": math.inf,
    "+inf": math.inf,
    "infinity": math.inf,
    "+infinity": math.inf,
    "-inf": -math.inf,
    "-infinity": -math.inf,
}


class Source(Struct, frozen=True, kw_only=True):
    """Which process sent an event."""

    host: str | None = None
    rank: int | None = None


class Event(Struct, frozen=True, kw_only=True):
    """One process, one step, many metrics. Values may be non-finite.

    A plain typed value (a msgspec struct): the engine reads its attributes, the wire
    decoder builds it straight from a message's bytes, checking the annotated bounds (the
    contract's, from :mod:`streamwatch._event_model`, which the validating path's pydantic
    model reads too); :func:`decode_event` builds it once pydantic has read the input.
    Constructing one directly checks nothing: callers pass values of the annotated types.
    """

    run_id: Annotated[str, Meta(**RUN_ID_RULES)]
    step: Annotated[int, Meta(**STEP_RULES)]
    ts: float | None = None
    metrics: Annotated[dict[str, float], Meta(min_length=1)]
    source: Source | None = None
    tags: dict[str, str] = {}

    def model_copy(self, *, update: dict[str, Any]) -> Event:
        """This event with some fields changed (the spelling scripts know from pydantic).

        >>> Event(run_id="r", step=1, metrics={"x": 1.0}).model_copy(update={"step": 2}).step
        2
        """
        return structs.replace(self, **update)

    def to_json_dict(self) -> dict[str, Any]:
        """The contract's JSON object (non-finite values stay floats; ``json`` writes NaN)."""
        out: dict[str, Any] = {"run_id": self.run_id, "step": self.step}
        if self.ts is not None:
            out["ts"] = self.ts
        out["metrics"] = dict(self.metrics)
        source = self.source
        if source is not None:
            out["source"] = {
                k: v for k, v in (("host", source.host), ("rank", source.rank)) if v is not None
            }
        if self.tags:
            out["tags"] = dict(self.tags)
        return out


def _from_model(model: EventModel) -> Event:
    source = model.source
    return Event(
        run_id=model.run_id,
        step=model.step,
        ts=model.ts,
        metrics=model.metrics,
        source=None if source is None else Source(host=source.host, rank=source.rank),
        tags=model.tags,
    )


def finished_event(run_id: str, step: int, ts: float | None, source: Source | None) -> Event:
    """The marker a process sends when its run completes (not a metric: the engine stops
    expecting events from the run instead of reporting it stalled)."""
    return Event(
        run_id=run_id,
        step=step,
        ts=ts,
        metrics={FINISHED_METRIC: 1.0},
        source=source,
        tags={FINISHED_TAG: FINISHED_VALUE},
    )


def is_finished(event: Event) -> bool:
    return event.tags.get(FINISHED_TAG) == FINISHED_VALUE


def source_key(source: Source | None) -> str:
    """A compact, stable name for a process: ``host/rank``, ``host``, ``rank3`` or ``""``."""
    if source is None:
        return ""
    if source.host is not None and source.rank is not None:
        return f"{source.host}/{source.rank}"
    if source.host is not None:
        return source.host
    if source.rank is not None:
        return f"rank{source.rank}"
    return ""


@dataclass(frozen=True, slots=True)
class Problem:
    """Input that was set aside, with enough context to find it and understand why."""

    origin: str  # "file.jsonl:17", "topic/partition@offset", ...
    reason: str
    run_id: str | None = None
    step: int | None = None
    metric: str | None = None

    def __str__(self) -> str:
        where = [self.origin]
        if self.run_id is not None:
            where.append(f"run {self.run_id!r}")
        if self.step is not None:
            where.append(f"step {self.step}")
        return f"{', '.join(where)}: {self.reason}"


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."


def to_float(value: object) -> float | None:
    """Read a metric value: numbers, bools excluded, non-finite words and null as NaN.

    Returns None when the value is not a number at all.
    """
    if value is None:
        return math.nan
    if isinstance(value, float):
        return value
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _NONFINITE_WORDS:
            return _NONFINITE_WORDS[word]
        try:
            return float(word)
        except ValueError:
            return None
    return None


def _clean_metrics(
    raw: object, origin: str, run_id: str | None, step: int | None
) -> tuple[dict[str, float], list[Problem]]:
    if not isinstance(raw, dict):
        return {}, [
            Problem(origin, f"'metrics' must be an object, got {_short(raw)}", run_id, step)
        ]
    metrics: dict[str, float] = {}
    problems: list[Problem] = []
    for name, value in raw.items():
        number = to_float(value)
        if number is None:
            problems.append(
                Problem(
                    origin,
                    f"metric {name!r} value {_short(value)} is not a number",
                    run_id,
                    step,
                    str(name),
                )
            )
        elif not name:
            problems.append(Problem(origin, "metric with an empty name", run_id, step))
        else:
            metrics[name] = number
    return metrics, problems


def decode_event(
    obj: object, origin: str = "<event>", run_id: str | None = None
) -> tuple[Event | None, list[Problem]]:
    """Validate one decoded JSON object against the contract.

    ``run_id`` fills in a missing run id (a file name, say). Values that are not numbers are
    set aside one by one, so a single bad metric does not lose the rest of the event. Returns
    the event (None when nothing usable is left) and the problems found.
    """
    if type(obj) is dict and ("run_id" in obj or run_id is None):
        event = _decode_plain(obj)
        if event is not None:
            return event, []
    if not isinstance(obj, dict):
        return None, [Problem(origin, f"expected a JSON object, got {type(obj).__name__}")]
    data = dict(obj)
    if "run_id" not in data and run_id is not None:
        data["run_id"] = run_id
    rid = data.get("run_id") if isinstance(data.get("run_id"), str) else None
    raw_step = data.get("step")
    if isinstance(raw_step, bool):  # JSON true/false: pydantic would read it as step 1/0
        why = f"'step' {str(raw_step).lower()} is a boolean, not a step number"
        return None, [Problem(origin, why, rid)]
    step = raw_step if isinstance(raw_step, int) else None
    if "metrics" not in data and "name" in data:
        if "value" not in data:
            name = _short(data["name"])
            return None, [Problem(origin, f"metric {name} has no 'value'", rid, step)]
        data["metrics"] = {str(data.pop("name")): data.pop("value")}
    if "metrics" not in data:
        return None, [Problem(origin, "no 'metrics' object and no 'name'/'value' pair", rid, step)]
    metrics, problems = _clean_metrics(data["metrics"], origin, rid, step)
    if data.get("ts") is not None:
        ts = to_float(data["ts"])
        if ts is None or ts - ts != 0.0:  # not a number, or not finite
            problems.append(
                Problem(
                    origin,
                    f"'ts' {_short(data['ts'])} is not a time in seconds; the event is kept "
                    "without it",
                    rid,
                    step,
                )
            )
            del data["ts"]
    if not metrics:
        if not problems:
            problems.append(Problem(origin, "event carries no metrics", rid, step))
        return None, problems
    data["metrics"] = metrics
    try:
        model = EventModel.model_validate(data)
    except ValidationError as exc:
        problems = [Problem(origin, _explain(exc, data), rid, step)]
        return None, problems
    return _from_model(model), problems


def plain_event(event: Event) -> Event | None:
    """The event itself when the one rule its type's bounds cannot say holds (no metric with
    an empty name); else None. Both readers of the common case (:func:`_decode_plain` here,
    the wire decoder) end with this."""
    return None if "" in event.metrics else event


def _decode_plain(obj: dict[str, Any]) -> Event | None:
    """The common case: a well-formed event whose values are all plain numbers (pydantic's
    strict mode: no strings for numbers, no booleans), a finite or absent ``ts``, no metric
    with an empty name. None: take the careful path, which reads the rest and explains what
    it cannot. (The wire decoder reads the same cases from bytes, with msgspec.)"""
    try:
        model = EventModel.model_validate(obj, strict=True)
    except ValidationError:
        return None
    metrics, ts = model.metrics, model.ts
    if not metrics or (ts is not None and ts - ts != 0.0):
        return None
    return plain_event(_from_model(model))


def _explain(exc: ValidationError, data: dict[str, Any]) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:3]:
        field = ".".join(str(p) for p in err["loc"]) or "event"
        value = data.get(str(err["loc"][0])) if err["loc"] else None
        parts.append(f"{field}: {err['msg'].lower()} (got {_short(value)})")
    return "; ".join(parts)
