"""The control topic's messages: stop requests and action records, keyed by run id.

One JSON object per message, written by the service (:mod:`streamwatch.live.control`) and
read by the training-side client (:mod:`streamwatch.client.publish_control`), which acts only on
``"type": "stop"``. Every message also carries the run's action records so far (``done``):
the topic is compacted, so the last message of a run is enough for a new owner of the run
to repeat none of them. Light: JSON only, importable by the training-side client.

>>> body = stop_message("grpo-7", step=812, reason="entropy collapse", incident="ab12",
...     record={"rule": "stop"}, done=[{"rule": "stop"}])
>>> message = parse(body)
>>> message["type"], message["step"], is_stop_for(message, "grpo-7"), is_stop_for(message, "b")
('stop', 812, True, False)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DEFAULT_CONTROL_TOPIC", "VERSION", "is_stop_for", "parse", "stop_message"]

DEFAULT_CONTROL_TOPIC = "streamwatch.control"
VERSION = 1


def stop_message(
    run_id: str,
    *,
    step: int,
    reason: str,
    incident: str,
    record: Mapping[str, Any],
    done: Sequence[Mapping[str, Any]],
    stop: bool = True,
) -> bytes:
    """A message: a stop request (``stop``) or only a record of an action (``"record"``)."""
    body = {
        "version": VERSION,
        "type": "stop" if stop else "record",
        "run_id": run_id,
        "step": step,
        "reason": reason,
        "incident": incident,
        "record": dict(record),
        "done": [dict(d) for d in done],
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def parse(value: bytes | None) -> dict[str, Any] | None:
    """A control message, or None for bytes that are not one."""
    if not value:
        return None
    try:
        body = json.loads(value)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(body, dict) or body.get("version") != VERSION:
        return None
    return body


def is_stop_for(message: Mapping[str, Any], run_id: str) -> bool:
    return message.get("type") == "stop" and message.get("run_id") == run_id
