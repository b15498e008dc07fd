"""What an incident has cost and where it is heading, as plain sentences: one wording for
the console summary, the report and every receiver. (No numpy here: receivers and the light
commands import it.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamwatch.actions.record import describe as describe_action
from streamwatch.engine.cost import describe_cost
from streamwatch.incidents import Incident

__all__ = ["describe_projection", "incident_notes"]


def incident_notes(inc: Incident) -> list[str]:
    """The incident's cost and projection sentences (either may be missing), then what was
    done about it (``stop requested at step 812``)."""
    notes = [describe_cost(inc.kind, inc.cost), describe_projection(inc.indicator, inc.projection)]
    return [n for n in notes if n] + [describe_action(a) for a in inc.actions]


def describe_projection(series: str, projection: Mapping[str, Any] | None) -> str | None:
    """One plain sentence for an incident's ``projection`` field (None when there is none)."""
    if not projection:
        return None
    name = series.replace("_", " ")
    level = float(projection["level"])
    shown = f"{level:,.0f}" if abs(level) >= 100 else f"{level:.3g}"
    return (
        f"{name} projected to reach {shown} near step "
        f"{projection['step']:,}, between {projection['low']:,} and {projection['high']:,}"
    )
