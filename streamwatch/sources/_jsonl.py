"""Line-per-object readers: streamwatch JSONL and the verl file logger."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from streamwatch.events import Event, decode_event
from streamwatch.sources._reading import ReadContext

__all__ = ["read_streamwatch", "read_verl"]


_SINGLE_FIELDS = ("name", "value")
_NO_VALUE = object()
#: A step's single-metric lines beyond this many start a new event (bounds memory).
_MAX_GROUP = 10_000


def _origin_key(obj: dict[str, Any]) -> tuple[object, ...]:
    """What must match for single-metric lines to belong to one event."""
    return (obj.get("run_id"), obj.get("step"), obj.get("ts"), obj.get("source"), obj.get("tags"))


class _Group:
    """Consecutive single-metric lines of one process and step, read as one event.

    The lines are validated together, once; only when that finds a problem is each line
    validated on its own, so that every problem names its own line.
    """

    def __init__(self, ctx: ReadContext) -> None:
        self._ctx = ctx
        self._key: tuple[object, ...] = ()
        self._lines: list[tuple[int, dict[str, Any]]] = []
        self._values: dict[str, object] = {}

    def add(self, lineno: int, obj: dict[str, Any]) -> Event | None:
        """Take one single-metric line; return the event it closes, if any."""
        key = _origin_key(obj)
        name = str(obj["name"])
        done = None
        lines = self._lines
        if lines and (key != self._key or name in self._values or len(lines) >= _MAX_GROUP):
            done = self.flush()
        if not self._lines:
            self._key = key
        self._lines.append((lineno, obj))
        # a line without a value fails the joint validation, and is then named on its own
        self._values[name] = obj.get("value", _NO_VALUE)
        return done

    def flush(self) -> Event | None:
        lines, values = self._lines, self._values
        if not lines:
            return None
        self._lines, self._values = [], {}
        ctx = self._ctx
        first_line, first = lines[0]
        if len(lines) == 1:
            return ctx.decode(first, first_line, ctx.fallback_run_id)
        joined = {k: v for k, v in first.items() if k not in _SINGLE_FIELDS}
        joined["metrics"] = values
        ctx.stats.where = first_line
        event, problems = decode_event(joined, ctx.origin(first_line), ctx.fallback_run_id)
        if not problems:
            return event
        return self._one_by_one(lines)

    def _one_by_one(self, lines: list[tuple[int, dict[str, Any]]]) -> Event | None:
        events = [self._ctx.decode(obj, n, self._ctx.fallback_run_id) for n, obj in lines]
        good = [e for e in events if e is not None]
        if len(good) <= 1:
            return good[0] if good else None
        metrics = {k: v for e in good for k, v in e.metrics.items()}
        return good[0].model_copy(update={"metrics": metrics})


def read_streamwatch(ctx: ReadContext) -> Iterator[Event]:
    """Batched (``metrics``) and single-metric (``name``/``value``) lines, in file order.

    Consecutive single-metric lines of one process and step (same run, step, source, ts and
    tags) become one event, as the process logged them in one step.
    """
    override = ctx.run_id
    fallback = ctx.fallback_run_id
    ctx.stats.step_source = "'step'"
    group = _Group(ctx)
    for lineno, raw in ctx.lines():
        ok, obj = ctx.parse_json(lineno, raw)
        if not ok:
            continue
        if isinstance(obj, dict):
            if override is not None:
                obj["run_id"] = override
            if "metrics" not in obj and "name" in obj:
                done = group.add(lineno, obj)
                if done is not None:
                    yield done
                continue
        done = group.flush()
        if done is not None:
            yield done
        event = ctx.decode(obj, lineno, fallback)
        if event is not None:
            yield event
    done = group.flush()
    if done is not None:
        yield done


def read_verl(ctx: ReadContext) -> Iterator[Event]:
    """verl's file logger: ``{"step": n, "data": {name: value}}`` per line."""
    run_id = ctx.file_run_id
    ctx.line_run_id = run_id
    ctx.stats.step_source = "'step'"
    for lineno, raw in ctx.lines():
        ok, obj = ctx.parse_json(lineno, raw)
        if not ok:
            continue
        if isinstance(obj, dict) and "data" in obj:
            obj = {"run_id": run_id, "step": obj.get("step"), "metrics": obj["data"]}
        elif isinstance(obj, dict):
            step = obj.get("step")
            ctx.problem(
                lineno,
                'no \'data\' object (expected {"step": n, "data": {...}})',
                run_id,
                step if isinstance(step, int) and not isinstance(step, bool) else None,
            )
            continue
        event = ctx.decode(obj, lineno, run_id)
        if event is not None:
            yield event
