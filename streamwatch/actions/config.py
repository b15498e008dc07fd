"""The ``[[actions]]`` rules of a config file: what to do about which incidents.

A rule matches incidents like a route does (run glob, kinds, indicator glob, the run's tags,
a minimum severity) and adds what makes acting safe: the incident must still be firing
``confirm_steps`` steps after it reached the rule's severity, the severity is critical
unless said otherwise (never info), and a rule only logs what it would do (``dry_run``)
until the config says ``dry_run = false``.

>>> rule = ActionRule.model_validate({"do": "stop", "run_id": "grpo-*"})
>>> rule.name, rule.min_severity.value, rule.confirm_steps, rule.dry_run
('stop', 'critical', 10, True)
>>> ActionRule.model_validate({"do": "stop", "min_severity": "info"})
Traceback (most recent call last):
...
pydantic_core._pydantic_core.ValidationError: 1 validation error for ActionRule
  Value error, action 'stop': never on info incidents (min_severity is warning or critical) ...

An example::

    [[actions]]
    name = "stop-collapse"
    do = "stop"                 # stop | signal | command | stop_file
    kinds = ["entropy_collapse", "reward_collapse"]
    run_id = "grpo-*"
    tags = { team = "rl" }      # the run's event tags must match (globs)
    confirm_steps = 10          # still firing 10 steps after it turned critical
    dry_run = false             # the default (true) only logs what would be done
"""

from __future__ import annotations

import signal as _signal
import string
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from streamwatch.actions.args import CONFIRM_STEPS
from streamwatch.incidents import KINDS, Severity

__all__ = ["PATH_FIELDS", "ActionRule", "Do"]

Do = Literal["stop", "signal", "command", "stop_file"]

#: Fields a ``stop_file`` path template may use.
PATH_FIELDS = frozenset({"run_id", "kind", "indicator", "id", "step"})


class ActionRule(BaseModel):
    """One ``[[actions]]`` entry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field("", pattern=r"^[A-Za-z0-9_.-]{0,64}$", description="default: do")
    do: Do
    run_id: str = Field("*", description="glob on the run id")
    kinds: tuple[str, ...] = Field((), description="incident kinds; empty: any")
    indicator: str = Field("*", description="glob on the indicator")
    tags: dict[str, str] = Field(default_factory=dict, description="tag -> glob; all must match")
    min_severity: Severity = Severity.CRITICAL
    confirm_steps: int = Field(
        CONFIRM_STEPS,
        ge=0,
        description="steps the incident must stay firing at that severity first",
    )
    dry_run: bool = Field(True, description="only log what would be done")
    # signal
    pid: int | None = Field(None, gt=0, description="signal: the process (or group) to signal")
    process_group: bool = Field(False, description="signal: the pid's whole process group")
    signal: str = Field("SIGTERM", description="signal: its name")
    # command
    command: str | None = Field(None, description="command: run by the shell, incident on stdin")
    timeout: float = Field(30.0, gt=0, description="command: seconds before it is killed")
    # stop_file
    path: str | None = Field(None, description="stop_file: path template, e.g. /ckpt/{run_id}.stop")
    # failures
    retries: int = Field(2, ge=0, description="tries after a failed one, then it is set aside")
    retry_seconds: float = Field(5.0, ge=0, description="between tries")
    retry_interrupted: bool = Field(
        False,
        description="run again an action whose process ended while it ran (outcome unknown)",
    )

    @model_validator(mode="after")
    def _valid(self) -> ActionRule:
        if not self.name:
            object.__setattr__(self, "name", self.do)
        me = f"action {self.name!r}"
        if self.min_severity is Severity.INFO:
            raise ValueError(f"{me}: never on info incidents (min_severity is warning or critical)")
        unknown = [k for k in self.kinds if k not in KINDS]
        if unknown:
            raise ValueError(f"{me}: unknown kind(s) {unknown}; known: {list(KINDS)}")
        if self.do == "signal":
            if self.signal not in _signal.Signals.__members__:
                raise ValueError(f"{me}: unknown signal {self.signal!r} (e.g. SIGTERM, SIGINT)")
        elif self.do == "command" and not (self.command or "").strip():
            raise ValueError(f"{me}: do = 'command' needs command")
        elif self.do == "stop_file":
            if not self.path:
                raise ValueError(f"{me}: do = 'stop_file' needs path")
            names = {n for _, n, _, _ in string.Formatter().parse(self.path) if n is not None}
            if names - PATH_FIELDS:
                extra, known = sorted(names - PATH_FIELDS), sorted(PATH_FIELDS)
                raise ValueError(f"{me}: path: unknown field(s) {extra}; known: {known}")
        return self

    @property
    def signum(self) -> int:
        return int(_signal.Signals[self.signal])
