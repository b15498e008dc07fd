"""One ``[[rules]]`` entry of the config, validated at start-up: its condition parses, its
message uses only the fields it may.

.. code-block:: toml

    [[rules]]
    name = "format-reward-dies"
    expr = "rewards/format/mean < 0.05"
    for = 20
    after_step = 50
    severity = "warning"
    message = "format reward {value:.3f} at step {step}"
    remedy = ["check the chat template"]
    labels = { team = "post-training" }
"""

from __future__ import annotations

import string
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

from streamwatch.incidents import Severity
from streamwatch.rules.grammar import Condition, RuleSyntaxError, parse

__all__ = ["MESSAGE_FIELDS", "RuleConfig"]

#: The fields a rule's message may use.
MESSAGE_FIELDS: Final = frozenset({"value", "metric", "step"})


class RuleConfig(BaseModel):
    """A team's own condition on a run's metrics: a ``user_rule`` incident named ``name``
    when ``expr`` holds at ``for`` steps in a row after step ``after_step``."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, hide_input_in_errors=True
    )

    name: str = Field(pattern=r"^[A-Za-z0-9_.:-]{1,64}$", description="the incident's indicator")
    expr: str = Field(description="the condition (streamwatch.rules.grammar)")
    for_: int = Field(1, ge=1, le=1_000_000, alias="for", description="steps in a row it holds")
    after_step: int = Field(0, ge=0, description="judged at steps after this one")
    severity: Severity = Severity.WARNING
    message: str = Field("", description="may use {value}, {metric}, {step}")
    remedy: tuple[str, ...] = Field((), description="what to try, in order")
    labels: dict[str, str] = Field(default_factory=dict, description="for routing; in evidence")

    @model_validator(mode="after")
    def _valid(self) -> RuleConfig:
        try:
            parse(self.expr)
        except RuleSyntaxError as exc:
            raise ValueError(f"rule {self.name!r}: expr: {exc}") from None
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(self.message) if f is not None}
        except ValueError as exc:
            raise ValueError(f"rule {self.name!r}: message: {exc}") from None
        unknown = sorted(fields - MESSAGE_FIELDS)
        if unknown:
            known = ", ".join("{" + f + "}" for f in sorted(MESSAGE_FIELDS))
            raise ValueError(
                f"rule {self.name!r}: message: unknown field(s) {unknown}; known: {known}"
            )
        return self

    @property
    def condition(self) -> Condition:
        """The parsed condition (it parsed at validation)."""
        return parse(self.expr)
