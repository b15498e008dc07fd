"""Discord webhooks: a message as embeds, within Discord's documented limits.

Execute Webhook takes ``content`` (at most 2,000 characters) and up to 10 ``embeds``; an embed
has a title (256), a description (4,096), up to 25 fields (name 256, value 1,024), a footer
(2,048), and all the embeds of a message together at most 6,000 characters of title,
description, field names and values, footer and author. Discord answers 204 (or 200), 429
with ``Retry-After`` when rate limited, 400 with the offending path for a payload beyond a
limit. ``allowed_mentions`` is empty: a run id like ``@here`` never pings anyone. Producer
text in content, descriptions and fields passes through :func:`~streamwatch.names.for_discord`
too: no markdown, masked link (``[click](https://evil.example)``) or mention comes of it.

A message: ``content`` is the header line (severity, kind, run); one embed per incident
(colour by severity, green when resolved; the message and remedies in the description; key
evidence as inline fields; the run link as the embed's URL; the event time as its timestamp),
the last embed summarising what does not fit. :func:`check_discord` checks the limits.

>>> from streamwatch.alerting.testing import incident
>>> from streamwatch.alerting.message import Message
>>> inc = incident("grpo-7", "entropy_collapse", indicator="entropy", severity="critical")
>>> p = discord_payload(Message.build("discord", "g", {"run_id": "grpo-7"}, (inc,)))
>>> p["embeds"][0]["title"], p["embeds"][0]["color"] == COLORS["critical"]
('CRITICAL entropy_collapse on entropy at step 100', True)
>>> check_discord(p)
[]
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from streamwatch.alerting.config import Receiver, Templates
from streamwatch.alerting.message import Message
from streamwatch.alerting.notes import incident_notes
from streamwatch.alerting.notify.http import HttpRequest
from streamwatch.alerting.notify.text import clip, flatten_evidence, header_text, incident_link
from streamwatch.incidents import Incident, Status
from streamwatch.names import for_discord

__all__ = ["COLORS", "DiscordNotifier", "check_discord", "discord_payload"]

CONTENT_CHARS = 2000
EMBEDS = 10
TITLE_CHARS = 256
DESCRIPTION_CHARS = 4096
FIELDS = 25
FIELD_NAME_CHARS = 256
FIELD_VALUE_CHARS = 1024
FOOTER_CHARS = 2048
TOTAL_CHARS = 6000
# tighter caps of our own, so that several incidents fit in one message
_DESCRIPTION = 1200
_KEY_EVIDENCE = 8
_FIELD_VALUE = 100
_SUMMARY = 1000

COLORS = {"critical": 0xD73A49, "warning": 0xE3A008, "info": 0x3B82F6, "resolved": 0x2EA043}


def _chars(embed: dict[str, Any]) -> int:
    fields = embed.get("fields", [])
    return (
        len(embed.get("title", ""))
        + len(embed.get("description", ""))
        + sum(len(f["name"]) + len(f["value"]) for f in fields)
        + len(embed.get("footer", {}).get("text", ""))
        + len(embed.get("author", {}).get("name", ""))
    )


def _timestamp(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


def _embed(inc: Incident, message: Message, link: str | None) -> dict[str, Any]:
    resolved = inc.status is Status.RESOLVED
    state = "RESOLVED" if resolved else inc.severity.value.upper()
    onset = f" (onset step {inc.onset_step})" if inc.onset_step is not None else ""
    title = f"{state} {inc.kind} on {inc.indicator} at step {inc.step}{onset}"
    text = for_discord(inc.message)
    notes = incident_notes(inc)
    if notes:
        text += "\n" + for_discord(" · ".join(notes))
    if not resolved and inc.because:
        text += "\n**Why:** " + for_discord("; ".join(inc.because))
    if not resolved and inc.remedies:
        text += "\n**Try:** " + " • ".join(for_discord(r) for r in inc.remedies)
    footer = f"streamwatch · run {inc.run_id} · message {message.id[:12]}"
    embed: dict[str, Any] = {
        "title": clip(title, TITLE_CHARS),
        "description": clip(text, _DESCRIPTION),
        "color": COLORS["resolved" if resolved else inc.severity.value],
        "footer": {"text": clip(footer, 300)},
    }
    if inc.metric and inc.metric != inc.indicator:
        embed["fields"] = [
            {"name": "metric", "value": clip(for_discord(inc.metric), 200), "inline": True}
        ]
    if not resolved and inc.evidence:
        items = flatten_evidence(inc.evidence)[:_KEY_EVIDENCE]
        embed.setdefault("fields", []).extend(
            {
                "name": clip(for_discord(k), 100),
                "value": clip(for_discord(v), _FIELD_VALUE),
                "inline": True,
            }
            for k, v in items
        )
    url = incident_link(link, inc)
    if url is not None:
        embed["url"] = url
    when = _timestamp(inc.ts)
    if when is not None:
        embed["timestamp"] = when
    return embed


def discord_payload(message: Message, *, link: str | None = None) -> dict[str, Any]:
    embeds: list[dict[str, Any]] = []
    total = 0
    budget = TOTAL_CHARS - _SUMMARY - 100
    shown = 0
    for inc in message.incidents:
        embed = _embed(inc, message, link)
        if len(embeds) >= EMBEDS - 1 or total + _chars(embed) > budget:
            break
        embeds.append(embed)
        total += _chars(embed)
        shown += 1
    rest = message.incidents[shown:]
    if rest:
        listed = ", ".join(f"{i.kind} at step {i.step} ({i.status.value})" for i in rest)
        summary = {
            "title": f"…and {len(rest)} more",
            "description": clip(for_discord(listed), _SUMMARY),
        }
        embeds.append(summary)
    return {
        "username": "streamwatch",
        "content": clip(for_discord(header_text(message)), CONTENT_CHARS),
        "embeds": embeds,
        "allowed_mentions": {"parse": []},
    }


def check_discord(payload: dict[str, Any]) -> list[str]:
    """Problems of a payload against Discord's limits; empty when Discord would take it."""
    problems: list[str] = []
    if len(payload.get("content", "")) > CONTENT_CHARS:
        problems.append(f"content over {CONTENT_CHARS} characters")
    embeds = payload.get("embeds", [])
    if len(embeds) > EMBEDS:
        problems.append(f"{len(embeds)} embeds > {EMBEDS}")
    if not payload.get("content") and not embeds:
        problems.append("neither content nor embeds")
    limits = {"title": TITLE_CHARS, "description": DESCRIPTION_CHARS}
    for n, embed in enumerate(embeds):
        for key, limit in limits.items():
            if len(embed.get(key, "")) > limit:
                problems.append(f"embeds[{n}].{key} over {limit} characters")
        fields = embed.get("fields", [])
        if len(fields) > FIELDS:
            problems.append(f"embeds[{n}]: {len(fields)} fields > {FIELDS}")
        for i, f in enumerate(fields):
            if not f.get("name") or len(f["name"]) > FIELD_NAME_CHARS:
                problems.append(f"embeds[{n}].fields[{i}].name empty or too long")
            if not f.get("value") or len(f["value"]) > FIELD_VALUE_CHARS:
                problems.append(f"embeds[{n}].fields[{i}].value empty or too long")
        if len(embed.get("footer", {}).get("text", "")) > FOOTER_CHARS:
            problems.append(f"embeds[{n}].footer over {FOOTER_CHARS} characters")
    total = sum(_chars(e) for e in embeds)
    if total > TOTAL_CHARS:
        problems.append(f"embeds total {total} characters > {TOTAL_CHARS}")
    return problems


class DiscordNotifier:
    def __init__(self, receiver: Receiver, templates: Templates) -> None:
        self.link = receiver.link or templates.link

    def payload(self, message: Message) -> dict[str, Any]:
        return discord_payload(message, link=self.link)

    def build(self, message: Message) -> HttpRequest:
        body = json.dumps(self.payload(message), ensure_ascii=False, separators=(",", ":"))
        return HttpRequest(body.encode("utf-8"), {"Content-Type": "application/json"})
