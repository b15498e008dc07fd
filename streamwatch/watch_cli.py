"""``streamwatch watch``: follow growing logs until interrupted (or idle), then summarise."""

from __future__ import annotations

import argparse
import sys
import time

from streamwatch.cli_sinks import incident_sinks
from streamwatch.clock import SystemClock
from streamwatch.config import load_config
from streamwatch.replay import format_runs
from streamwatch.watch import Watcher

__all__ = ["run_watch"]


def _follow(watcher: Watcher, clock: SystemClock, poll: float, idle_exit: float | None) -> None:
    """Poll until interrupted, or until ``idle_exit`` seconds pass without a new event."""
    last_event = clock.now()
    while True:
        seen = watcher.stats.events
        watcher.poll()
        now = clock.now()
        if watcher.stats.events > seen:
            last_event = now
        elif idle_exit is not None and now - last_event >= idle_exit:
            return
        time.sleep(poll)


def run_watch(args: argparse.Namespace) -> int:
    if args.poll <= 0:
        raise ValueError(f"--poll must be > 0 seconds, got {args.poll}")
    config = load_config(args.config)
    clock = SystemClock()
    with incident_sinks(args, config) as sinks:
        watcher = Watcher(
            args.paths, clock, config, sinks=sinks, format=args.format, run_id=args.run_id
        )
        print(f"watching {len(args.paths)} path(s), reading every {args.poll:g} s", file=sys.stderr)
        try:
            _follow(watcher, clock, args.poll, args.idle_exit)
        except KeyboardInterrupt:
            pass
        finally:
            watcher.close()
    s = watcher.stats
    print(f"watched {len(watcher.followers)} source(s): {s.events:,} events in {s.polls} polls")
    print("\n".join(format_runs(watcher.tally)) or "no incidents")
    for why in watcher.not_followed.values():
        print(f"not followed: {why}")
    if s.problems:
        print(f"{s.problems:,} problem(s) set aside; first ones:")
        print("\n".join(f"  {p}" for p in s.kept[:10]))
    return 0
