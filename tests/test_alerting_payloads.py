"""Payloads: the JSON webhook (v1 and Alertmanager v4), the signature, Slack Block Kit."""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from datetime import datetime
from pathlib import Path
from typing import Any

from streamwatch.alerting.config import AlertingConfig, Receiver, Templates
from streamwatch.alerting.dispatcher import Dispatcher
from streamwatch.alerting.message import Message
from streamwatch.alerting.notify.slack import (
    FIELD_CHARS,
    HEADER_CHARS,
    MAX_BLOCKS,
    SECTION_CHARS,
    check_block_kit,
    slack_payload,
)
from streamwatch.alerting.notify.text import clip, units
from streamwatch.alerting.notify.webhook import (
    SIGNATURE_HEADER,
    WebhookNotifier,
    alertmanager_payload,
    verify_signature,
    webhook_payload,
)
from streamwatch.alerting.testing import RecordingReceiver, incident
from streamwatch.incidents import Incident

LINK = "https://wandb.ai/team/proj/runs/{run_id}"


def message(*incs: Incident, part: tuple[int, int] = (1, 1), repeat: int = 0) -> Message:
    labels = {"run_id": incs[0].run_id}
    key = f'route0:{{run_id="{incs[0].run_id}"}}'
    return Message.build(
        "hook",
        key,
        labels,
        incs,
        created=1_700_000_500.0,
        part=part,
        repeat=repeat,
        starts={incs[0].id: 1_700_000_050.0},
    )


# -- streamwatch v1 -----------------------------------------------------------------------


def test_webhook_payload_v1_carries_firing_and_resolved_incidents() -> None:
    fired = incident("grpo 7", "entropy_collapse", indicator="entropy", severity="critical")
    other = incident("grpo 7", "metric_spike", step=120)
    gone = Incident.model_validate({**other.model_dump(), "status": "resolved", "step": 150})
    body = webhook_payload(message(fired, other, gone, part=(2, 3)), link=LINK)
    assert body["version"] == "1" and body["status"] == "firing"
    assert body["group"] == {
        "key": 'route0:{run_id="grpo 7"}',
        "labels": {"run_id": "grpo 7"},
        "part": 2,
        "parts": 3,
    }
    assert [(i["kind"], i["status"]) for i in body["incidents"]] == [
        ("entropy_collapse", "firing"),
        ("metric_spike", "firing"),
        ("metric_spike", "resolved"),
    ]
    first = body["incidents"][0]
    assert first["link"] == "https://wandb.ai/team/proj/runs/grpo%207"
    assert {k: first[k] for k in ("id", "run_id", "severity", "step", "evidence", "remedies")} == {
        "id": fired.id,
        "run_id": "grpo 7",
        "severity": "critical",
        "step": 100,
        "evidence": fired.evidence,
        "remedies": fired.remedies,
    }
    only_resolved = webhook_payload(message(gone))
    assert only_resolved["status"] == "resolved" and only_resolved["incidents"][0]["link"] is None


# -- Alertmanager v4 ----------------------------------------------------------------------

AM_KEYS = {
    "version",
    "groupKey",
    "truncatedAlerts",
    "status",
    "receiver",
    "groupLabels",
    "commonLabels",
    "commonAnnotations",
    "externalURL",
    "alerts",
}
AM_ALERT_KEYS = {
    "status",
    "labels",
    "annotations",
    "startsAt",
    "endsAt",
    "generatorURL",
    "fingerprint",
}


def _rfc3339(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_alertmanager_v4_payload_has_the_fields_receivers_read() -> None:
    fired = incident("r1", "entropy_collapse", indicator="entropy", onset_step=80)
    spike = incident("r1", "metric_spike", step=130)
    gone = Incident.model_validate({**spike.model_dump(), "status": "resolved", "step": 150})
    body = alertmanager_payload(
        message(fired, spike, gone), link=LINK, external_url="http://sw.example:9000"
    )
    assert set(body) == AM_KEYS
    assert body["version"] == "4" and body["status"] == "firing" and body["receiver"] == "hook"
    assert body["groupLabels"] == {"run_id": "r1"} and body["truncatedAlerts"] == 0
    assert body["commonLabels"] == {"run_id": "r1", "severity": "warning"}
    assert body["externalURL"] == "http://sw.example:9000"
    for alert in body["alerts"]:
        assert set(alert) == AM_ALERT_KEYS
        assert all(isinstance(v, str) for v in alert["labels"].values())
        assert all(isinstance(v, str) for v in alert["annotations"].values())
        _rfc3339(alert["startsAt"])
    a0, _, a2 = body["alerts"]
    assert a0["labels"]["alertname"] == "entropy_collapse" and a0["fingerprint"] == fired.id
    assert a0["annotations"]["onset_step"] == "80"
    assert json.loads(a0["annotations"]["evidence"]) == fired.evidence
    assert a0["endsAt"] == "0001-01-01T00:00:00Z"
    assert _rfc3339(a0["startsAt"]).timestamp() == 1_700_000_050.0  # first firing time
    assert a0["generatorURL"] == "https://wandb.ai/team/proj/runs/r1"
    assert a2["status"] == "resolved" and _rfc3339(a2["endsAt"]).timestamp() == gone.ts


# -- the signature ------------------------------------------------------------------------


def test_the_signature_verifies_with_the_shared_secret(tmp_path: Path) -> None:
    secret = "shared-secret-123"
    with RecordingReceiver() as rx:
        config = AlertingConfig.model_validate(
            {
                "receivers": [
                    {"name": "v1", "type": "webhook", "url": rx.url, "secret": secret},
                    {
                        "name": "am",
                        "type": "webhook",
                        "url": rx.url,
                        "secret": secret,
                        "format": "alertmanager",
                    },
                    {"name": "plain", "type": "webhook", "url": rx.url},
                ],
                "group_wait": 0,
            }
        )
        d = Dispatcher(config, state_dir=tmp_path)
        d.send(incident("r1"))
        assert d.close(10).delivered == 3
    signed = [r for r in rx.requests if SIGNATURE_HEADER in r.headers]
    assert len(signed) == 2 and len(rx.requests) == 3
    for r in signed:
        header = r.headers[SIGNATURE_HEADER]
        expected = "sha256=" + hmac.new(secret.encode(), r.body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(header, expected)
        assert verify_signature(r.body, header, secret)
        assert not verify_signature(r.body + b" ", header, secret)
        assert not verify_signature(r.body, header, "wrong")
    versions = sorted(r.json()["version"] for r in rx.requests)
    assert versions == ["1", "1", "4"]


def test_the_notifier_builds_bytes_and_headers() -> None:
    receiver = Receiver.model_validate(
        {"name": "x", "type": "webhook", "url": "https://e.com/h", "secret": "k"}
    )
    req = WebhookNotifier(receiver, Templates()).build(message(incident()))
    assert json.loads(req.body)["version"] == "1"
    assert verify_signature(req.body, req.headers[SIGNATURE_HEADER], "k")


# -- Slack --------------------------------------------------------------------------------


def _texts(payload: dict[str, Any]) -> list[str]:
    out = []
    for b in payload["blocks"]:
        if "text" in b:
            out.append(b["text"]["text"])
        out += [f["text"] for f in b.get("fields", [])]
        out += [e["text"] for e in b.get("elements", [])]
    return out


def _assert_slack_limits(payload: dict[str, Any]) -> None:
    """Independent of check_block_kit: Slack's documented limits, counted here."""
    assert check_block_kit(payload) == []
    blocks = payload["blocks"]
    assert 1 <= len(blocks) <= MAX_BLOCKS
    for b in blocks:
        assert b["type"] in {"header", "section", "context", "divider"}
        if b["type"] == "header":
            assert b["text"]["type"] == "plain_text" and units(b["text"]["text"]) <= HEADER_CHARS
        if b["type"] == "section":
            assert units(b["text"]["text"]) <= SECTION_CHARS
            assert len(b.get("fields", [])) <= 10
            assert all(units(f["text"]) <= FIELD_CHARS for f in b.get("fields", []))
        if b["type"] == "context":
            assert 1 <= len(b["elements"]) <= 10
            assert all(units(e["text"]) <= 3000 for e in b["elements"])
    assert len(json.dumps(blocks, ensure_ascii=False)) <= 12_000
    for text in _texts(payload):  # no half entity or half link left by a cut
        assert text.count("<") == text.count(">")
        for piece in text.split("&")[1:]:
            assert piece.startswith(("amp;", "lt;", "gt;"))


def test_slack_message_shows_severity_run_kind_step_evidence_remedies_and_link() -> None:
    inc = incident(
        "grpo-7",
        "entropy_collapse",
        indicator="entropy",
        metric="actor/entropy",
        severity="critical",
        step=812,
        onset_step=790,
        message="entropy fell to 0.05 of its reference <fast> & steep",
        evidence={"ratio_to_reference": 0.0512, "window": {"steps": 8}},
        remedies=["raise the entropy bonus", "lower the learning rate"],
    )
    payload = slack_payload(message(inc), link=LINK)
    _assert_slack_limits(payload)
    header, section, context, link, footer = payload["blocks"]
    assert header["text"]["text"] == "CRITICAL: entropy_collapse in run grpo-7"
    text = section["text"]["text"]
    for part in (
        "*CRITICAL*",
        "`entropy_collapse`",
        "`entropy`",
        "`actor/entropy`",
        "*812*",
        "onset step 790",
        "&lt;fast&gt; &amp; steep",
    ):
        assert part in text
    assert [f["text"] for f in section["fields"]] == [
        "*ratio_to_reference*\n0.0512",
        "*window.steps*\n8",
    ]
    assert "raise the entropy bonus" in context["elements"][0]["text"]
    assert link["text"]["text"] == "<https://wandb.ai/team/proj/runs/grpo-7|Open run grpo-7>"
    assert message(inc).id[:12] in footer["elements"][0]["text"]
    assert payload["text"].startswith("CRITICAL: entropy_collapse in run grpo-7")


def test_slack_payload_stays_valid_for_huge_evidence_and_long_text() -> None:
    nested = {f"k{i}": {"deep": {"x" * 300: float(i) / 7}} for i in range(300)}
    huge = incident(
        "r" * 400,
        "metric_spike",
        indicator="i" * 500,
        message="<b>&" * 30_000 + "😀" * 5000,
        evidence={"text": "y" * 10_000, "nan": math.nan, "list": list(range(5000)), **nested},
        remedies=["do something " * 400] * 60,
    )
    payload = slack_payload(message(huge), link=LINK + "?q=" + "z" * 5000)
    _assert_slack_limits(payload)
    section = payload["blocks"][1]
    assert len(section["fields"]) == 9  # 8 numbers and "... N more"
    assert section["fields"][-1]["text"].endswith("more numbers")


def test_slack_payload_with_many_incidents_summarises_the_rest() -> None:
    many = tuple(
        incident("r1", "metric_spike", indicator=f"metric_{i}", step=i, message="m" * 900)
        for i in range(200)
    )
    payload = slack_payload(message(*many, part=(1, 2), repeat=3), link=LINK)
    _assert_slack_limits(payload)
    assert payload["blocks"][0]["text"]["text"] == (
        "Still firing: 200 incident updates in run r1 (200 warning) [1/2]"
    )
    summary = [t for t in _texts(payload) if t.startswith("…and ")]
    assert len(summary) == 1
    shown = sum(1 for b in payload["blocks"] if b["type"] == "section" and "fields" in b)
    assert summary[0].startswith(f"…and {200 - shown} more: metric_spike at step {shown} (firing)")


def test_clip_counts_utf16_and_never_cuts_an_entity_or_link() -> None:
    assert clip("😀" * 10, 5) == "😀😀…" and units("😀😀…") == 5
    assert clip("ab &amp; cd", 6) == "ab …"
    assert clip("see <https://x.y/zzzzzz|link> now", 12) == "see …"
    assert clip("short", 5) == "short"


def test_slack_receiver_gets_valid_block_kit_over_http(tmp_path: Path) -> None:
    incs = [
        incident(
            "grpo-1",
            "metric_spike",
            indicator=f"metric_{i}",
            step=i,
            message="z" * 5000,
            evidence={f"e{j}": j / 3 for j in range(40)},
            remedies=["r" * 3000] * 3,
        )
        for i in range(40)
    ]
    with RecordingReceiver() as rx:
        config = AlertingConfig.model_validate(
            {
                "receivers": [{"name": "slack", "type": "slack", "url": rx.url}],
                "group_max": 40,
                "templates": {"link": LINK},
            }
        )
        d = Dispatcher(config, state_dir=tmp_path)
        for inc in incs:
            d.send(inc)
        assert d.close(timeout=10).delivered == 1
    (request,) = rx.requests
    assert request.headers["Content-Type"].startswith("application/json")
    _assert_slack_limits(request.json())
