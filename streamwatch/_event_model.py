"""The validating path's reader of the event contract (pydantic), and the contract's bounds.

The bounds are written once, here: pydantic's ``Field`` reads them below, and msgspec's
``Meta`` (which takes the same names) reads them on :class:`streamwatch.events.Event`, the
struct the wire decoder fills straight from bytes. The models are named as the contract
names its parts, because pydantic's messages name them ("instance of Source"): they are
what a producer reads in a dead letter's reason.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: Steps beyond this are rejected as corrupt (2**53: the largest exactly representable float).
MAX_STEP = 2**53
RUN_ID_RULES: dict[str, Any] = {"min_length": 1, "max_length": 512}
STEP_RULES: dict[str, Any] = {"ge": 0, "le": MAX_STEP}


class Source(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    host: str | None = None
    rank: int | None = None


class Event(BaseModel):
    """Lax where the wire decoder is strict (an integral float step reads as a step), and
    the reader that explains what it rejects."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    run_id: str = Field(**RUN_ID_RULES)
    step: int = Field(**STEP_RULES)
    ts: float | None = None
    metrics: dict[str, float]
    source: Source | None = None
    tags: dict[str, str] = Field(default_factory=dict)
