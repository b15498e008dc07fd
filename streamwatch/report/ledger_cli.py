"""``streamwatch ledger``: the command (its options are registered by :mod:`.cli`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from streamwatch.config import load_config

__all__ = ["HELP", "run_ledger"]

EXIT_OK, EXIT_WORSE = 0, 1
HELP = "judge a sweep: candidates against a baseline's seeds, every indicator, corrected"


def run_ledger(args: argparse.Namespace) -> int:
    from .data import is_indicator
    from .ledger import LEDGER_INDICATORS, build_ledger
    from .ledger_runs import assign, expand_selectors, parse_arm, read_runs
    from .ledger_table import format_ledger

    arms = [parse_arm(sel, text) for sel, text in args.candidate]
    paths = [Path(p) for p in args.paths] or expand_selectors(
        [*args.baseline, *(a.selector for a in arms)]
    )
    if not paths:
        raise ValueError("no recorded file given, and no selector names an existing file")
    config = load_config(args.config)
    indicators = args.indicator or list(LEDGER_INDICATORS)
    runs = read_runs(paths, config, [n for n in indicators if not is_indicator(n)])
    base, groups, rest = assign(runs, args.baseline, arms)
    ledger = build_ledger(
        base,
        groups,
        indicators=indicators,
        correction=args.correction,
        alpha=args.alpha,
        window=args.window,
        unassigned=[r.key for r in rest],
    )
    print(format_ledger(ledger))
    if args.output:
        from .ledger_page import write_ledger

        out = write_ledger(
            ledger,
            Path(args.output),
            max_points=args.max_points,
            js="plain" if args.plain_js else "gzip",
        )
        print(f"ledger page: {out}")
    worse = any(e.worse for e in ledger.entries)
    return EXIT_WORSE if args.fail_on_worse and worse else EXIT_OK
