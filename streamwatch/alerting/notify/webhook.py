"""Generic JSON webhooks: the streamwatch v1 payload, or Alertmanager's v4 so that existing
Alertmanager receivers work unchanged. With a secret, every request carries
``X-Streamwatch-Signature: sha256=<hex HMAC-SHA256 of the body>``.

streamwatch v1::

    {"version": "1", "status": "firing"|"resolved", "message_id": str, "receiver": str,
     "group": {"key": str, "labels": {"run_id": str, ...}, "part": int, "parts": int},
     "repeat": int, "incidents": [<incident, as in the JSONL files, plus "link">...]}

>>> body = b'{"version":"1"}'
>>> header = sign(body, "s3cret")
>>> header.startswith("sha256=") and verify_signature(body, header, "s3cret")
True
>>> verify_signature(body, header, "other")
False
"""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime
from typing import Any

from streamwatch.alerting.config import Receiver, Templates
from streamwatch.alerting.message import Message
from streamwatch.alerting.notify.http import HttpRequest
from streamwatch.alerting.notify.text import incident_link
from streamwatch.incidents import Incident, Status

__all__ = [
    "MESSAGE_ID_HEADER",
    "PAYLOAD_VERSION",
    "SIGNATURE_HEADER",
    "WebhookNotifier",
    "alertmanager_payload",
    "sign",
    "verify_signature",
    "webhook_payload",
]

PAYLOAD_VERSION = "1"
SIGNATURE_HEADER = "X-Streamwatch-Signature"
MESSAGE_ID_HEADER = "X-Streamwatch-Message-Id"
_ZERO_TIME = "0001-01-01T00:00:00Z"


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify_signature(body: bytes, header: str, secret: str) -> bool:
    """For receivers: does the signature header match the body? (constant-time compare)"""
    return hmac.compare_digest(sign(body, secret).encode(), header.strip().encode())


def webhook_payload(message: Message, *, link: str | None = None) -> dict[str, Any]:
    incidents = []
    for inc in message.incidents:
        item = inc.model_dump(mode="json")
        item["link"] = incident_link(link, inc)
        item["because"] = inc.because
        incidents.append(item)
    part, parts = message.part
    return {
        "version": PAYLOAD_VERSION,
        "status": message.status.value,
        "message_id": message.id,
        "receiver": message.receiver,
        "group": {"key": message.group_key, "labels": message.labels, "part": part, "parts": parts},
        "repeat": message.repeat,
        "incidents": incidents,
    }


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _am_alert(inc: Incident, message: Message, link: str | None, external: str) -> dict[str, Any]:
    when = inc.ts if inc.ts is not None else message.created
    started = message.starts.get(inc.id, when)
    annotations = {
        "summary": f"{inc.kind} in run {inc.run_id} at step {inc.step}",
        "description": inc.message,
        "step": str(inc.step),
        "evidence": json.dumps(inc.evidence, sort_keys=True, separators=(",", ":")),
    }
    if inc.because:
        annotations["because"] = "; ".join(inc.because)
    if inc.onset_step is not None:
        annotations["onset_step"] = str(inc.onset_step)
    if inc.remedies:
        annotations["remedies"] = "\n".join(inc.remedies)
    return {
        "status": inc.status.value,
        "labels": {
            "alertname": inc.kind,
            "run_id": inc.run_id,
            "kind": inc.kind,
            "severity": inc.severity.value,
            "indicator": inc.indicator,
            "metric": inc.metric,
        },
        "annotations": annotations,
        "startsAt": _rfc3339(started),
        "endsAt": _rfc3339(when) if inc.status is Status.RESOLVED else _ZERO_TIME,
        "generatorURL": incident_link(link, inc) or external,
        "fingerprint": inc.id,
    }


def _common(maps: list[dict[str, str]]) -> dict[str, str]:
    if not maps:
        return {}
    first = maps[0]
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in maps[1:])}


def alertmanager_payload(
    message: Message, *, link: str | None = None, external_url: str | None = None
) -> dict[str, Any]:
    """Alertmanager's webhook payload, version 4."""
    external = external_url or ""
    alerts = [_am_alert(inc, message, link, external) for inc in message.incidents]
    return {
        "version": "4",
        "groupKey": message.group_key,
        "truncatedAlerts": 0,
        "status": message.status.value,
        "receiver": message.receiver,
        "groupLabels": dict(message.labels),
        "commonLabels": _common([a["labels"] for a in alerts]),
        "commonAnnotations": _common([a["annotations"] for a in alerts]),
        "externalURL": external,
        "alerts": alerts,
    }


class WebhookNotifier:
    def __init__(
        self, receiver: Receiver, templates: Templates, external_url: str | None = None
    ) -> None:
        self.format = receiver.format
        self.link = receiver.link or templates.link
        self.external_url = external_url
        self._secret = receiver.secret

    def payload(self, message: Message) -> dict[str, Any]:
        if self.format == "alertmanager":
            return alertmanager_payload(message, link=self.link, external_url=self.external_url)
        return webhook_payload(message, link=self.link)

    def build(self, message: Message) -> HttpRequest:
        body = json.dumps(self.payload(message), separators=(",", ":")).encode()
        headers = {MESSAGE_ID_HEADER: message.id}
        if self._secret is not None:
            headers[SIGNATURE_HEADER] = sign(body, self._secret.get_secret_value())
        return HttpRequest(body, headers)
