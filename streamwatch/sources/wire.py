"""The fast wire decode: a well-formed event's bytes straight to an :class:`Event`.

Nearly every message on the metrics topic has the contract's common shape: a run id, a
step, plain numbers, perhaps a finite ``ts``, a source and tags. msgspec reads such bytes
into typed structs in one pass, checking every type and bound of the contract as it goes
(:class:`~streamwatch.events.Event` with pydantic's strict mode: no string for a number, no
boolean for a step), and the event is built from them without a second validation. Anything
else (bare ``NaN``, a string value, a boolean step, a metric with an empty name, bytes that
are not JSON...) gives None here, and the caller takes the validating path, which reads what
it can and explains the rest; so what is set aside, and why, does not depend on this path.

>>> decode_plain(b'{"run_id": "r", "step": 3, "metrics": {"loss": 0.5}}').metrics
{'loss': 0.5}
>>> decode_plain(b'{"run_id": "r", "step": 3, "metrics": {"loss": NaN}}') is None
True
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from streamwatch.events import MAX_STEP, Event, Source, checked_event, checked_source

__all__ = ["decode_plain"]


class _Source(Struct):
    host: str | UnsetType | None = UNSET
    rank: int | UnsetType | None = UNSET


class _Event(Struct):
    run_id: Annotated[str, Meta(min_length=1, max_length=512)]
    step: Annotated[int, Meta(ge=0, le=MAX_STEP)]
    metrics: dict[str, float]
    ts: float | UnsetType | None = UNSET
    source: _Source | UnsetType | None = UNSET
    tags: dict[str, str] | UnsetType = UNSET


_decoder = msgspec.json.Decoder(_Event)
_ERRORS = (msgspec.DecodeError, msgspec.ValidationError)


def decode_plain(raw: bytes) -> Event | None:
    """The event these bytes hold when they have the common, valid shape; else None."""
    try:
        wire = _decoder.decode(raw)
    except _ERRORS:
        return None
    metrics = wire.metrics
    if not metrics or "" in metrics:
        return None
    given = {"run_id", "step", "metrics"}
    ts = wire.ts
    if ts is UNSET:
        ts = None
    else:
        if ts is not None and ts - ts != 0.0:
            return None
        given.add("ts")
    source: Any = wire.source
    if source is UNSET:
        source = None
    else:
        given.add("source")
        if source is not None:
            source = _source(source)
    tags = wire.tags
    if tags is UNSET:
        tags = {}
    else:
        given.add("tags")
    fields = {"run_id": wire.run_id, "step": wire.step, "ts": ts, "metrics": metrics}
    fields["source"] = source
    fields["tags"] = tags
    return checked_event(fields, given)


def _source(wire: _Source) -> Source:
    given = set()
    host, rank = wire.host, wire.rank
    if host is UNSET:
        host = None
    else:
        given.add("host")
    if rank is UNSET:
        rank = None
    else:
        given.add("rank")
    return checked_source({"host": host, "rank": rank}, given)
