"""Slack incoming webhooks: a message as Block Kit, always within Slack's documented limits.

Limits kept (Block Kit reference): at most 50 blocks a message; header text 150 characters;
section text 3,000; at most 10 section fields of 2,000 each; at most 10 context elements of
3,000 each. Slack also refuses messages whose blocks are long in total (``msg_blocks_too_long``,
seen near 13,000 characters), so the blocks of one message are kept under
:data:`MAX_BLOCKS_CHARS` of JSON. What does not fit is summarised in one line, never cut
mid-entity or mid-link. :func:`check_block_kit` checks a payload against all of this.

A message: a header (severity, kind, run), then per incident a section (severity, kind,
indicator, step, the message; the key evidence numbers as fields) and a context line with the
remedies, then the run link (from ``templates.link``) and a footer with the message id.

Producer text (run id, metric, message, evidence) goes into mrkdwn through
:func:`~streamwatch.names.for_slack`, names into code spans: ``<!channel>`` or
``<https://x|click>`` in a run id stays text, never a mention or a link. The header is
plain text.
"""

from __future__ import annotations

import json
from typing import Any

from streamwatch.alerting.config import Receiver, Templates
from streamwatch.alerting.message import Message
from streamwatch.alerting.notes import incident_notes
from streamwatch.alerting.notify.http import HttpRequest
from streamwatch.alerting.notify.text import (
    because_text,
    clip,
    flatten_evidence,
    header_text,
    incident_fields,
    incident_link,
    units,
)
from streamwatch.incidents import Incident, Severity, Status
from streamwatch.names import for_slack

__all__ = ["MAX_BLOCKS", "MAX_BLOCKS_CHARS", "SlackNotifier", "check_block_kit", "slack_payload"]

MAX_BLOCKS = 50
HEADER_CHARS = 150
SECTION_CHARS = 3000
FIELDS = 10
FIELD_CHARS = 2000
CONTEXT_ELEMENTS = 10
CONTEXT_CHARS = 3000
FALLBACK_CHARS = 3000
MAX_BLOCKS_CHARS = 12_000
# tighter caps of our own, so that several incidents fit in one message
_MESSAGE_CHARS = 1500
_REMEDY_CHARS = 1000
_NOTES_CHARS = 600
_KEY_EVIDENCE = 8
_EVIDENCE_CHARS = 150
_LINK_CHARS = 1000
_SUMMARY_CHARS = 1500

_ICON = {Severity.INFO: ":large_blue_circle:", Severity.WARNING: ":warning:"}
_ICON[Severity.CRITICAL] = ":red_circle:"
_RESOLVED_ICON = ":white_check_mark:"


def _code(text: str) -> str:
    return "`" + for_slack(text).replace("`", "'") + "`"


def _mrkdwn(text: str, limit: int) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": clip(text, limit)}


def _label(inc: Incident) -> str:
    if inc.status is Status.RESOLVED:
        return f"{_RESOLVED_ICON} *RESOLVED*"
    return f"{_ICON[inc.severity]} *{inc.severity.value.upper()}*"


def _incident_blocks(inc: Incident) -> list[dict[str, Any]]:
    onset = f" (onset step {inc.onset_step})" if inc.onset_step is not None else ""
    metric = f" ({_code(inc.metric)})" if inc.metric and inc.metric != inc.indicator else ""
    head = (
        f"{_label(inc)} {_code(inc.kind)} on {_code(inc.indicator)}{metric} "
        f"at step *{inc.step}*{onset}"
    )
    text = head + "\n" + clip(for_slack(inc.message), _MESSAGE_CHARS)
    notes = incident_notes(inc)
    if notes:
        text += "\n" + clip(for_slack(" · ".join(notes)), _NOTES_CHARS)
    section: dict[str, Any] = {"type": "section", "text": _mrkdwn(text, SECTION_CHARS)}
    if inc.status is Status.FIRING and inc.evidence:
        items = flatten_evidence(inc.evidence)
        shown = items[:_KEY_EVIDENCE]
        fields = [_mrkdwn(f"*{for_slack(k)}*\n{for_slack(v)}", _EVIDENCE_CHARS) for k, v in shown]
        if len(items) > len(shown):
            fields.append(_mrkdwn(f"*…*\n{len(items) - len(shown)} more numbers", FIELD_CHARS))
        section["fields"] = fields[:FIELDS]
    blocks = [section]
    why = because_text(inc) if inc.status is Status.FIRING else ""
    if why:
        element = _mrkdwn(clip("*Why:* " + for_slack(why), _REMEDY_CHARS), CONTEXT_CHARS)
        blocks.append({"type": "context", "elements": [element]})
    if inc.status is Status.FIRING and inc.remedies:
        tries = "*Try:* " + " • ".join(for_slack(r) for r in inc.remedies)
        element = _mrkdwn(clip(tries, _REMEDY_CHARS), CONTEXT_CHARS)
        blocks.append({"type": "context", "elements": [element]})
    return blocks


def _size(blocks: list[dict[str, Any]]) -> int:
    return units(json.dumps(blocks, ensure_ascii=False))


def slack_payload(
    message: Message, *, link: str | None = None, link_text: str = "Open run {run_id}"
) -> dict[str, Any]:
    header = {
        "type": "header",
        "text": {
            "type": "plain_text",
            "text": clip(header_text(message), HEADER_CHARS),
            "emoji": True,
        },
    }
    tail: list[dict[str, Any]] = []
    url = incident_link(link, message.incidents[0])
    if url is not None and units(url) <= _LINK_CHARS:
        label = link_text.format(**incident_fields(message.incidents[0])).replace("|", "/")
        text = f"<{for_slack(url)}|{for_slack(label)}>"
        tail.append({"type": "section", "text": _mrkdwn(text, SECTION_CHARS)})
    footer = f"streamwatch · message {message.id[:12]} · group {message.group_key}"
    tail.append({"type": "context", "elements": [_mrkdwn(for_slack(footer), 300)]})

    max_body = MAX_BLOCKS - 1 - len(tail) - 1  # header, tail, and room for a summary
    char_budget = MAX_BLOCKS_CHARS - _size([header, *tail]) - _SUMMARY_CHARS - 100
    body: list[dict[str, Any]] = []
    shown = 0
    for inc in message.incidents:
        more = ([{"type": "divider"}] if body else []) + _incident_blocks(inc)
        if len(body) + len(more) > max_body or _size(body + more) > char_budget:
            break
        body += more
        shown += 1
    rest = message.incidents[shown:]
    if rest:
        listed = ", ".join(f"{i.kind} at step {i.step} ({i.status.value})" for i in rest)
        summary = f"…and {len(rest)} more: {for_slack(listed)}"
        body.append({"type": "section", "text": _mrkdwn(summary, _SUMMARY_CHARS)})

    first = message.incidents[0]
    fallback = f"{header_text(message)}: {first.message}"
    return {"text": clip(for_slack(fallback), FALLBACK_CHARS), "blocks": [header, *body, *tail]}


def check_block_kit(payload: dict[str, Any]) -> list[str]:
    """Problems of a payload against the limits above; empty when Slack would take it."""
    problems: list[str] = []
    blocks = payload.get("blocks", [])
    if not 1 <= len(blocks) <= MAX_BLOCKS:
        problems.append(f"{len(blocks)} blocks (1..{MAX_BLOCKS})")
    if units(payload.get("text", "")) > 40_000:
        problems.append("top-level text over 40,000 characters")
    if _size(blocks) > MAX_BLOCKS_CHARS:
        problems.append(f"blocks total {_size(blocks)} characters of JSON > {MAX_BLOCKS_CHARS}")

    def text_ok(where: str, obj: Any, limit: int, types: tuple[str, ...]) -> None:
        if not isinstance(obj, dict) or obj.get("type") not in types:
            problems.append(f"{where}: not a text object of type {types}")
        elif not obj.get("text") or units(obj["text"]) > limit:
            problems.append(f"{where}: text empty or over {limit} characters")

    for n, block in enumerate(blocks):
        kind = block.get("type")
        where = f"blocks[{n}] ({kind})"
        if kind == "header":
            text_ok(where, block.get("text"), HEADER_CHARS, ("plain_text",))
        elif kind == "section":
            if "text" not in block and "fields" not in block:
                problems.append(f"{where}: needs text or fields")
            if "text" in block:
                text_ok(where, block["text"], SECTION_CHARS, ("mrkdwn", "plain_text"))
            fields = block.get("fields", [])
            if len(fields) > FIELDS:
                problems.append(f"{where}: {len(fields)} fields > {FIELDS}")
            for i, f in enumerate(fields):
                text_ok(f"{where}.fields[{i}]", f, FIELD_CHARS, ("mrkdwn", "plain_text"))
        elif kind == "context":
            elements = block.get("elements", [])
            if not 1 <= len(elements) <= CONTEXT_ELEMENTS:
                problems.append(f"{where}: {len(elements)} elements (1..{CONTEXT_ELEMENTS})")
            for i, e in enumerate(elements):
                text_ok(f"{where}.elements[{i}]", e, CONTEXT_CHARS, ("mrkdwn", "plain_text"))
        elif kind != "divider":
            problems.append(f"{where}: unexpected block type")
        if units(str(block.get("block_id", ""))) > 255:
            problems.append(f"{where}: block_id over 255 characters")
    return problems


class SlackNotifier:
    def __init__(self, receiver: Receiver, templates: Templates) -> None:
        self.link = receiver.link or templates.link
        self.link_text = templates.link_text

    def payload(self, message: Message) -> dict[str, Any]:
        return slack_payload(message, link=self.link, link_text=self.link_text)

    def build(self, message: Message) -> HttpRequest:
        body = json.dumps(self.payload(message), ensure_ascii=False, separators=(",", ":"))
        headers = {"Content-Type": "application/json; charset=utf-8"}
        return HttpRequest(body.encode("utf-8"), headers)
