"""The fast wire decode: a well-formed event's bytes straight to an :class:`Event`.

Nearly every message on the metrics topic has the contract's common shape: a run id, a
step, plain numbers, perhaps a finite ``ts``, a source and tags. msgspec reads such bytes
into the :class:`~streamwatch.events.Event` struct itself in one pass, checking every type
and bound its annotations give (strictly: no string for a number, no boolean for a step);
no other object is built. Anything else (bare ``NaN``, a string value, a boolean step, a
metric with an empty name, bytes that are not JSON...) gives None here, and the caller takes
the validating path, which reads what it can and explains the rest; so what is set aside,
and why, does not depend on this path.

>>> decode_plain(b'{"run_id": "r", "step": 3, "metrics": {"loss": 0.5}}').metrics
{'loss': 0.5}
>>> decode_plain(b'{"run_id": "r", "step": 3, "metrics": {"loss": NaN}}') is None
True
"""

from __future__ import annotations

import msgspec

from streamwatch.events import Event, plain_event

__all__ = ["decode_plain"]

_decode = msgspec.json.Decoder(Event).decode
_ERRORS = (msgspec.DecodeError, msgspec.ValidationError)


def decode_plain(raw: bytes) -> Event | None:
    """The event these bytes hold when they have the common, valid shape; else None."""
    try:
        event = _decode(raw)
    except _ERRORS:
        return None
    return plain_event(event)
