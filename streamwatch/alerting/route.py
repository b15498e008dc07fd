"""Routing: which receivers get an incident. Pure; every answer says why.

Routes are tried in order; the first one that matches wins, unless it says ``continue``, in
which case the next ones are tried too. A receiver named by several matching routes gets the
incident once.

>>> from streamwatch.alerting.config import Route
>>> from streamwatch.incidents import Incident
>>> inc = Incident(id="a1", run_id="grpo-7", kind="entropy_collapse", severity="warning",
...     status="firing", indicator="entropy", metric="actor/entropy", step=812, message="")
>>> d = match_route(inc, Route(receivers=("pager",), min_severity="critical"))
>>> d.reason.value, d.detail
('severity_below', 'severity warning < critical')
>>> receivers_for(inc, [Route(receivers=("slack",), run_id="grpo-*")])
[(0, 'slack')]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from streamwatch.alerting.config import Route
from streamwatch.alerting.decide import Decision, Reason
from streamwatch.incidents import Incident

__all__ = ["RouteHit", "describe_route", "explain_routes", "match_route", "receivers_for"]


def describe_route(route: Route) -> str:
    parts = []
    if route.run_id != "*":
        parts.append(f"run_id={route.run_id}")
    if route.kinds:
        parts.append(f"kind in {list(route.kinds)}")
    if route.indicator != "*":
        parts.append(f"indicator={route.indicator}")
    parts.extend(f"label {k}={v}" for k, v in sorted(route.labels.items()))
    parts.append(f"severity>={route.min_severity.value}")
    if route.continue_:
        parts.append("continue")
    return ", ".join(parts)


def match_route(inc: Incident, route: Route) -> Decision:
    if not fnmatchcase(inc.run_id, route.run_id):
        why = f"run_id {inc.run_id} does not match {route.run_id}"
        return Decision(False, Reason.RUN_ID_MISMATCH, why)
    if route.kinds and inc.kind not in route.kinds:
        return Decision(False, Reason.KIND_MISMATCH, f"kind {inc.kind} not in {list(route.kinds)}")
    if not fnmatchcase(inc.indicator, route.indicator):
        why = f"indicator {inc.indicator} does not match {route.indicator}"
        return Decision(False, Reason.INDICATOR_MISMATCH, why)
    unmatched = _unmatched_label(inc, route)
    if unmatched is not None:
        return Decision(False, Reason.LABEL_MISMATCH, unmatched)
    if inc.severity.rank < route.min_severity.rank:
        why = f"severity {inc.severity.value} < {route.min_severity.value}"
        return Decision(False, Reason.SEVERITY_BELOW, why)
    return Decision(True, Reason.ROUTE_MATCHED, f"matched ({describe_route(route)})")


def _unmatched_label(inc: Incident, route: Route) -> str | None:
    """Why the incident's labels (a ``[[rules]]`` incident's, in its evidence) miss the
    route's, or None when each of the route's matches."""
    if not route.labels:
        return None
    given = inc.evidence.get("labels")
    labels = given if isinstance(given, dict) else {}
    for key, glob in sorted(route.labels.items()):
        value = labels.get(key)
        if not isinstance(value, str) or not fnmatchcase(value, glob):
            return f"label {key}={value if value is not None else '(none)'} does not match {glob}"
    return None


@dataclass(frozen=True, slots=True)
class RouteHit:
    index: int
    route: Route
    decision: Decision


def explain_routes(inc: Incident, routes: Sequence[Route]) -> list[RouteHit]:
    """Every route's verdict, in order; routes after the winning one are "not reached"."""
    hits: list[RouteHit] = []
    stopped = False
    for i, route in enumerate(routes):
        if stopped:
            why = "not reached: an earlier route won"
            hits.append(RouteHit(i, route, Decision(False, Reason.NOT_REACHED, why)))
            continue
        decision = match_route(inc, route)
        hits.append(RouteHit(i, route, decision))
        stopped = decision.notify and not route.continue_
    return hits


def receivers_for(inc: Incident, routes: Sequence[Route]) -> list[tuple[int, str]]:
    """(route index, receiver) pairs for an incident, each receiver once."""
    out: list[tuple[int, str]] = []
    seen: set[str] = set()
    for hit in explain_routes(inc, routes):
        if not hit.decision.notify:
            continue
        for name in hit.route.receivers:
            if name not in seen:
                seen.add(name)
                out.append((hit.index, name))
    return out
