"""Where a command's incident updates go: the console, ``--incidents-out``, the alert
receivers of its flags and config; shared by ``replay`` and ``watch``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from streamwatch.alerting.muted import Muted
from streamwatch.cli.alerting import alerting_from_args, build_dispatcher
from streamwatch.clock import SystemClock
from streamwatch.config import Config
from streamwatch.incidents import Severity
from streamwatch.sinks import ConsoleSink, JsonlSink, Sink

__all__ = ["Outputs", "incident_sinks"]


@dataclass
class Outputs:
    """The sinks of a command, and what its silences muted (for its summary)."""

    sinks: list[Sink]
    muted: Muted
    #: the ``--incidents-out`` file (after the block: what it could not take, ``lost``)
    jsonl: JsonlSink | None = None


@contextmanager
def incident_sinks(
    args: argparse.Namespace, config: Config, *, append: bool = False
) -> Iterator[Outputs]:
    """What the silences mute (each muted line says so), the console (``--min-severity``
    and worse, unless ``--quiet``), the JSONL file (each update written through as it comes;
    ``append`` to keep what the file held) and the alert dispatcher; closed on leaving, the
    dispatcher once every alert is delivered or spooled (its report on stderr)."""
    alerting = alerting_from_args(args, config.alerting)
    muted = Muted(alerting.silences_path(), SystemClock())
    sinks: list[Sink] = [muted]
    if not args.quiet:
        shown = Severity(getattr(args, "min_severity", "warning"))
        sinks.append(ConsoleSink(sys.stdout, min_severity=shown, note=muted.note))
    jsonl = JsonlSink(args.incidents_out, append=append) if args.incidents_out else None
    if jsonl is not None:
        sinks.append(jsonl)
    alerts = build_dispatcher(args, config.alerting)
    if alerts is not None:
        sinks.append(alerts)
    try:
        yield Outputs(sinks, muted, jsonl)
    finally:
        if jsonl is not None:
            jsonl.close()
        if alerts is not None:
            print(alerts.close(timeout=30), file=sys.stderr)
