"""Text shared by the payload builders: run links, evidence numbers, safe truncation.

>>> render_link("https://wandb.ai/team/proj/runs/{run_id}?step={step}", run_id="grpo 7/a",
...     kind="entropy_collapse", indicator="entropy", metric="actor/entropy",
...     severity="warning", step=812, id="ab12")
'https://wandb.ai/team/proj/runs/grpo%207%2Fa?step=812'
>>> flatten_evidence({"ratio": 0.0512345, "window": {"n": 8, "sd": 1e-9}})
[('ratio', '0.05123'), ('window.n', '8'), ('window.sd', '1e-09')]
>>> clip("x" * 10, 5)
'xxxx…'
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any
from urllib.parse import quote

from streamwatch.alerting.message import Message
from streamwatch.incidents import Incident, Status

__all__ = [
    "because_text",
    "clip",
    "flatten_evidence",
    "format_value",
    "header_text",
    "incident_fields",
    "incident_link",
    "render_link",
    "units",
]

ELLIPSIS = "…"


def render_link(template: str, **fields: object) -> str:
    """A template filled with URL-quoted incident fields (every text is quoted whole)."""
    return template.format(**{k: quote(str(v), safe="") for k, v in fields.items()})


def incident_fields(inc: Incident) -> dict[str, object]:
    """The fields a link template may use (see ``LINK_FIELDS`` in the alerting config)."""
    return {
        "run_id": inc.run_id,
        "kind": inc.kind,
        "indicator": inc.indicator,
        "metric": inc.metric,
        "severity": inc.severity.value,
        "step": inc.step,
        "id": inc.id,
    }


def incident_link(template: str | None, inc: Incident) -> str | None:
    return None if template is None else render_link(template, **incident_fields(inc))


def format_value(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    if isinstance(value, int | str):
        return str(value)
    return json.dumps(value, separators=(",", ":"), default=str)


def flatten_evidence(evidence: dict[str, Any], prefix: str = "") -> list[tuple[str, str]]:
    """``(dotted key, readable value)`` pairs, nested dicts flattened, in their order; the
    ``because`` list is not a number and is shown on its own (:func:`because_text`)."""
    out: list[tuple[str, str]] = []
    for key, value in evidence.items():
        if key == "because" and not prefix:
            continue
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.extend(flatten_evidence(value, f"{name}."))
        else:
            out.append((name, format_value(value)))
    return out


def because_text(inc: Incident) -> str:
    """Why the incident fired at its severity, in one line ("" when it does not say)."""
    return "; ".join(inc.because)


def units(text: str) -> int:
    """Length in UTF-16 code units (what a JavaScript-side limit counts); never less than
    the number of characters."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def clip(text: str, limit: int) -> str:
    """At most ``limit`` UTF-16 units, ending in an ellipsis when cut. Never leaves half an
    HTML entity (``&amp;``) or half a Slack link (``<url|text>``) behind."""
    if units(text) <= limit:
        return text
    kept: list[str] = []
    n = 0
    for ch in text:
        w = 2 if ord(ch) > 0xFFFF else 1
        if n + w > limit - 1:
            break
        kept.append(ch)
        n += w
    out = "".join(kept)
    amp = out.rfind("&")
    if amp != -1 and ";" not in out[amp:]:
        out = out[:amp]
    lt = out.rfind("<")
    if lt != -1 and ">" not in out[lt:]:
        out = out[:lt]
    return out + ELLIPSIS


def header_text(message: Message) -> str:
    """One line for a message: its incident, or a count by severity; a reminder and a part
    of a split group say so."""
    incs = message.incidents
    run = message.run_id
    if len(incs) == 1:
        inc = incs[0]
        state = "RESOLVED" if inc.status is Status.RESOLVED else inc.severity.value.upper()
        text = f"{state}: {inc.kind} in run {run}"
    else:
        firing = Counter(i.severity.value for i in incs if i.status is Status.FIRING)
        resolved = sum(1 for i in incs if i.status is Status.RESOLVED)
        parts = [f"{n} {sev}" for sev in ("critical", "warning", "info") if (n := firing[sev])]
        parts += [f"{resolved} resolved"] if resolved else []
        text = f"{len(incs)} incident updates in run {run} ({', '.join(parts)})"
    if message.repeat:
        text = f"Still firing: {text}"
    part, parts_n = message.part
    if parts_n > 1:
        text += f" [{part}/{parts_n}]"
    return text
