"""``streamwatch ledger``: the command (its options are registered by
:mod:`streamwatch.cli.report`).

With ``--refresh SECONDS`` it is a live view of a sweep still training: the files are read
again and the page rewritten every SECONDS (the page reloads itself as often), with one line
per round, until interrupted; candidates that are still running are judged on the steps
written so far, and their outlook moves with them.
"""

from __future__ import annotations

import argparse
import threading
from pathlib import Path

from streamwatch.cli.config_refs import load_offline_config
from streamwatch.config import Config
from streamwatch.ledger.entries import Ledger

__all__ = ["HELP", "run_ledger"]

EXIT_OK, EXIT_WORSE = 0, 1
HELP = "judge a sweep: candidates against a baseline's seeds, every indicator, corrected"


def _build(args: argparse.Namespace, config: Config) -> Ledger:
    from streamwatch.ledger.entries import LEDGER_INDICATORS, build_ledger
    from streamwatch.ledger.runs import assign, expand_selectors, parse_arm, read_runs
    from streamwatch.report.data import is_indicator

    arms = [parse_arm(sel, text) for sel, text in args.candidate]
    paths = [Path(p) for p in args.paths] or expand_selectors(
        [*args.baseline, *(a.selector for a in arms)]
    )
    if not paths:
        raise ValueError("no recorded file given, and no selector names an existing file")
    indicators = args.indicator or list(LEDGER_INDICATORS)
    runs = read_runs(paths, config, [n for n in indicators if not is_indicator(n)])
    base, groups, rest = assign(runs, args.baseline, arms)
    return build_ledger(
        base,
        groups,
        indicators=indicators,
        correction=args.correction,
        alpha=args.alpha,
        window=args.window,
        unassigned=[r.key for r in rest],
    )


def _write(args: argparse.Namespace, ledger: Ledger) -> Path:
    from streamwatch.ledger.page import write_ledger

    return write_ledger(
        ledger,
        Path(args.output),
        max_points=args.max_points,
        js="plain" if args.plain_js else "gzip",
        refresh_seconds=args.refresh,
    )


def _round_line(ledger: Ledger, n: int) -> str:
    running = sum(e.partial for e in ledger.entries)
    better = sum(e.better for e in ledger.entries)
    worse = sum(e.worse for e in ledger.entries)
    return (
        f"round {n}: {len(ledger.entries)} candidate(s), {running} running; {better} better, "
        f"{worse} worse verdict(s); baseline at step {ledger.baseline_last_step}"
    )


def run_ledger(args: argparse.Namespace) -> int:
    from streamwatch.ledger.table import format_ledger

    if args.refresh is not None and (args.refresh <= 0 or not args.output):
        raise ValueError("--refresh needs a positive number of seconds and -o FILE")
    config = load_offline_config(args.config, "ledger")
    ledger = _build(args, config)
    print(format_ledger(ledger))
    if args.output:
        print(f"ledger page: {_write(args, ledger)}")
    if args.refresh is not None:
        stop = threading.Event()
        n = 1
        while not stop.wait(args.refresh):
            n += 1
            ledger = _build(args, config)
            _write(args, ledger)
            print(_round_line(ledger, n), flush=True)
    worse = any(e.worse for e in ledger.entries)
    return EXIT_WORSE if args.fail_on_worse and worse else EXIT_OK
