"""``streamwatch watch``: follow growing logs until interrupted (or idle), then summarise."""

from __future__ import annotations

import argparse
import sys
import time

from streamwatch.alerting.cli import build_dispatcher
from streamwatch.alerting.dispatcher import Dispatcher
from streamwatch.clock import SystemClock
from streamwatch.config import load_config
from streamwatch.incidents import Severity
from streamwatch.replay import format_runs
from streamwatch.sinks import ConsoleSink, JsonlSink
from streamwatch.watch import Watcher

__all__ = ["run_watch"]


def run_watch(args: argparse.Namespace) -> int:
    if args.poll <= 0:
        raise ValueError(f"--poll must be > 0 seconds, got {args.poll}")
    config = load_config(args.config)
    sinks: list[ConsoleSink | JsonlSink | Dispatcher] = []
    if not args.quiet:
        sinks.append(ConsoleSink(sys.stdout, min_severity=Severity.WARNING))
    jsonl = JsonlSink(args.incidents_out) if args.incidents_out else None
    if jsonl is not None:
        sinks.append(jsonl)
    alerts = build_dispatcher(args, config.alerting)
    if alerts is not None:
        sinks.append(alerts)
    clock = SystemClock()
    watcher = Watcher(
        args.paths, clock, config, sinks=sinks, format=args.format, run_id=args.run_id
    )
    print(f"watching {len(args.paths)} path(s), reading every {args.poll:g} s", file=sys.stderr)
    last_event = clock.now()
    try:
        while True:
            seen = watcher.stats.events
            watcher.poll()
            now = clock.now()
            if watcher.stats.events > seen:
                last_event = now
            elif args.idle_exit is not None and now - last_event >= args.idle_exit:
                break
            time.sleep(args.poll)
    except KeyboardInterrupt:
        pass
    finally:
        watcher.close()
        if jsonl is not None:
            jsonl.close()
        if alerts is not None:
            print(alerts.close(timeout=30), file=sys.stderr)
    s = watcher.stats
    print(f"watched {len(watcher.followers)} source(s): {s.events:,} events in {s.polls} polls")
    print("\n".join(format_runs(watcher.tally)) or "no incidents")
    for why in watcher.not_followed.values():
        print(f"not followed: {why}")
    if s.problems:
        print(f"{s.problems:,} problem(s) set aside; first ones:")
        print("\n".join(f"  {p}" for p in s.kept[:10]))
    return 0
