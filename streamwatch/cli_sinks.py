"""Where a command's incident updates go: the console, ``--incidents-out``, the alert
receivers of its flags and config; shared by ``replay`` and ``watch``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from streamwatch.alerting.cli import build_dispatcher
from streamwatch.config import Config
from streamwatch.incidents import Severity
from streamwatch.sinks import ConsoleSink, JsonlSink, Sink

__all__ = ["incident_sinks"]


@contextmanager
def incident_sinks(
    args: argparse.Namespace, config: Config, *, append: bool = False
) -> Iterator[list[Sink]]:
    """The console (``--min-severity`` and worse, unless ``--quiet``), the JSONL file (each update
    written through as it comes; ``append`` to keep what the file held) and the alert
    dispatcher; closed on leaving, the dispatcher once every alert is delivered or spooled
    (its report on stderr)."""
    sinks: list[Sink] = []
    if not args.quiet:
        sinks.append(
            ConsoleSink(sys.stdout, min_severity=Severity(getattr(args, "min_severity", "warning")))
        )
    jsonl = JsonlSink(args.incidents_out, append=append) if args.incidents_out else None
    if jsonl is not None:
        sinks.append(jsonl)
    alerts = build_dispatcher(args, config.alerting)
    if alerts is not None:
        sinks.append(alerts)
    try:
        yield sinks
    finally:
        if jsonl is not None:
            jsonl.close()
        if alerts is not None:
            print(alerts.close(timeout=30), file=sys.stderr)
