"""Kafka as a source of events: connection settings and message decoding.

A message is one event, JSON-encoded (``NaN``/``Infinity`` tokens allowed), keyed by its
run id. :func:`decode_message` turns the bytes into an :class:`~streamwatch.events.Event`
or into a :class:`Rejected` that says why the message cannot be used; the service sends
rejected messages, untouched, to its dead-letter topic.

>>> decoded = decode_message(b'{"run_id": "r", "step": 1, "metrics": {"loss": NaN}}', "t/0@7")
>>> decoded.event.metrics, decoded.rejected
({'loss': nan}, None)
>>> decode_message(b"[1, 2]", "t/0@8").rejected
Rejected(reason='not_an_object', detail='expected a JSON object, got list')
>>> decode_message(b"x" * 2000, "t/0@9", max_bytes=1024).rejected.reason
'oversized'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from msgspec import Struct
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from streamwatch.events import Event, Problem, decode_event
from streamwatch.sources._json import loads
from streamwatch.sources.wire import decode_plain

__all__ = [
    "DEFAULT_MAX_MESSAGE_BYTES",
    "REASONS",
    "Decoded",
    "KafkaConnection",
    "Rejected",
    "decode_message",
]

#: Messages larger than this are set aside unread (the broker's default message size limit).
DEFAULT_MAX_MESSAGE_BYTES = 1_048_576

#: Why a message was set aside (the ``streamwatch.reason`` header of a dead letter).
REASONS = ("oversized", "not_json", "not_an_object", "invalid_event")

_DETAIL_CHARS = 500


class KafkaConnection(BaseModel):
    """Where the brokers are and how to authenticate: shared by every client we create."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_servers: str = Field(min_length=1, description="HOST:PORT[,HOST:PORT...]")
    client_id: str = "streamwatch"
    security_protocol: str = Field("PLAINTEXT", pattern="^(PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL)$")
    sasl_mechanism: str | None = Field(
        None, pattern="^(PLAIN|SCRAM-SHA-256|SCRAM-SHA-512|OAUTHBEARER|GSSAPI)$"
    )
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: str | None = None

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for kafka-python's consumer, producer and admin client."""
        kwargs: dict[str, Any] = {
            "bootstrap_servers": [s.strip() for s in self.bootstrap_servers.split(",") if s],
            "client_id": self.client_id,
            "security_protocol": self.security_protocol,
        }
        if self.sasl_mechanism is not None:
            kwargs["sasl_mechanism"] = self.sasl_mechanism
        if self.sasl_username is not None:
            kwargs["sasl_plain_username"] = self.sasl_username
        if self.sasl_password is not None:
            kwargs["sasl_plain_password"] = self.sasl_password.get_secret_value()
        if self.ssl_cafile is not None:
            kwargs["ssl_cafile"] = self.ssl_cafile
        return kwargs


@dataclass(frozen=True, slots=True)
class Rejected:
    """A message that cannot be used: a short reason code (one of :data:`REASONS`) and why."""

    reason: str
    detail: str


class Decoded(Struct, kw_only=True):
    """What one message gave: an event (maybe with some values set aside) or a rejection.

    A msgspec struct: built once per message, in C."""

    event: Event | None = None
    problems: list[Problem] = []
    rejected: Rejected | None = None


def decode_message(
    value: bytes | None,
    origin: str,
    *,
    max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    fast: bool = True,
) -> Decoded:
    """Decode one message value into an event; never raises.

    A well-formed event of the common shape is read by :func:`~streamwatch.sources.wire.
    decode_plain`; every other message by the validating path, which alone sets aside and
    explains. ``fast=False`` reads every message with pydantic (the reference: orjson, then
    the pydantic model)."""
    if fast and value is not None and len(value) <= max_bytes:
        event = decode_plain(value)
        if event is not None:
            return Decoded(event=event)
    if value is None:
        return Decoded(rejected=Rejected("not_json", "empty message (no value)"))
    if len(value) > max_bytes:
        return Decoded(
            rejected=Rejected("oversized", f"{len(value):,} bytes, more than {max_bytes:,}")
        )
    try:
        obj = loads(value)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError
        return Decoded(rejected=Rejected("not_json", _clip(str(exc))))
    if not isinstance(obj, dict):
        return Decoded(
            rejected=Rejected("not_an_object", f"expected a JSON object, got {type(obj).__name__}")
        )
    event, problems = decode_event(obj, origin)
    if event is None:
        detail = "; ".join(p.reason for p in problems) or "no usable event"
        return Decoded(problems=problems, rejected=Rejected("invalid_event", _clip(detail)))
    return Decoded(event=event, problems=problems)


def _clip(text: str) -> str:
    return text if len(text) <= _DETAIL_CHARS else text[: _DETAIL_CHARS - 3] + "..."
