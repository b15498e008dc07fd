"""Import paths of the previous layout, kept for one release: importing one warns
(``DeprecationWarning``) and gives the module at its new path, the same object.

>>> import warnings
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     from streamwatch.publish import Publisher
>>> Publisher.__module__, caught[0].category.__name__
('streamwatch.client.publish', 'DeprecationWarning')
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Sequence
from types import ModuleType

__all__ = ["MOVED", "install"]

#: Old module (under ``streamwatch.``) -> its new path.
MOVED = {
    "bindings": "engine.bindings",
    "cli_args": "cli.args",
    "cli_env": "cli.env",
    "cli_kafka": "cli.kafka",
    "cli_sinks": "cli.sinks",
    "commands": "cli.commands",
    "config_refs": "cli.config_refs",
    "control": "client.control",
    "cost": "engine.cost",
    "demo": "cli.demo",
    "findings": "engine.findings",
    "indicators": "engine.indicators",
    "install": "_install",
    "integrations": "client.integrations",
    "integrations.hf": "client.integrations.hf",
    "integrations.loop": "client.integrations.loop",
    "interrupt": "cli.interrupt",
    "kafka_tools": "live.kafka_tools",
    "monitor": "engine.monitor",
    "name_patterns": "engine.name_patterns",
    "notes": "alerting.notes",
    "outcome": "cli.outcome",
    "projection": "engine.projection",
    "publish": "client.publish",
    "publish_control": "client.publish_control",
    "publish_follow": "cli.publish_follow",
    "replay_tally": "replay.tally",
    "run": "engine.run",
    "scoring": "simulate.scoring",
    "scoring_projection": "simulate.scoring_projection",
    "snapshot": "engine.snapshot",
    "watch": "replay.watch",
    "watch_cli": "cli.watch",
    "report.cli": "cli.report",
    "report.ledger_cli": "cli.ledger",
    "alerting.cli": "cli.alerting",
    "actions.cli": "cli.actions",
    "report.ledger": "ledger.entries",
    "report.ledger_page": "ledger.page",
    "report.ledger_runs": "ledger.runs",
    "report.ledger_table": "ledger.table",
    "report.ledger_calibration": "ledger.calibration",
    "report.ledger_live": "ledger.live",
    "report.live": "live.report",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and loads it as the module at its new one."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        old = fullname.removeprefix("streamwatch.")
        if old == fullname or old not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = "streamwatch." + MOVED[spec.name.removeprefix("streamwatch.")]
        warnings.warn(
            f"{spec.name} moved to {new}; the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        pass


def install() -> None:
    """Put the alias finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.insert(0, _Alias())
