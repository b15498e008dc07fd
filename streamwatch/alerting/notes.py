"""What an incident has cost and where it is heading, as plain sentences: one wording for
the console summary, the report and every receiver. (No numpy here: receivers and the light
commands import it.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamwatch.actions.record import describe as describe_action
from streamwatch.engine.cost import describe_cost
from streamwatch.incidents import Incident

__all__ = ["crossed", "describe_projection", "incident_notes"]


def incident_notes(inc: Incident, reached: float | None = None) -> list[str]:
    """The incident's cost and projection sentences (either may be missing), then what was
    done about it (``stop requested at step 812``). ``reached``: the furthest the series went
    after the projection was made, when known (a crossed level is no longer a projection)."""
    notes = [
        describe_cost(inc.kind, inc.cost),
        describe_projection(inc.indicator, inc.projection, reached),
    ]
    return [n for n in notes if n] + [describe_action(a) for a in inc.actions]


def crossed(projection: Mapping[str, Any] | None, reached: float | None) -> bool:
    """Whether the series, having gone as far as ``reached``, has crossed the projected level.

    >>> p = {"level": 0.05, "rising": False, "step": 144, "low": 143, "high": 145}
    >>> crossed(p, 0.04), crossed(p, 0.2), crossed(p, None), crossed(None, 0.0)
    (True, False, False, False)
    """
    if not projection or reached is None or reached != reached:  # NaN: nothing known
        return False
    level = float(projection["level"])
    return reached >= level if projection.get("rising") else reached <= level


def describe_projection(
    series: str, projection: Mapping[str, Any] | None, reached: float | None = None
) -> str | None:
    """One plain sentence for an incident's ``projection`` field (None when there is none, or
    when the series has since crossed the level: ``reached`` is the furthest it went after
    the projection was made)."""
    if not projection or crossed(projection, reached):
        return None
    name = series.replace("_", " ")
    level = float(projection["level"])
    shown = f"{level:,.0f}" if abs(level) >= 100 else f"{level:.3g}"
    return (
        f"{name} projected to reach {shown} near step "
        f"{projection['step']:,}, between {projection['low']:,} and {projection['high']:,}"
    )
