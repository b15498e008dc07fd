"""``streamwatch report``, ``compare`` and ``ledger``: argument parsing and the commands.

The main command registers them with :func:`add_report_commands` and hands parsed
arguments to :func:`run_report_command`, which returns the exit code (None for a command
that is not one of these).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from streamwatch._install import install_hint
from streamwatch.cli.config_refs import load_offline_config
from streamwatch.cli.ledger import HELP as LEDGER_HELP
from streamwatch.cli.ledger import run_ledger
from streamwatch.cli.outcome import exit_code
from streamwatch.report.correction import CORRECTIONS

__all__ = ["add_report_commands", "run_report_command"]

EXIT_OK, EXIT_WORSE, EXIT_USAGE = 0, 1, 2


def add_report_commands(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``report``, ``compare`` and ``ledger`` on the ``streamwatch`` sub-command parser."""
    r = subparsers.add_parser(
        "report",
        help="write a self-contained HTML report of recorded runs, incidents drawn on the curves",
        description="Replay recorded logs through the engine and write one HTML file (opens "
        "offline) with, per run, response length, reward, entropy, token probability and "
        "held-out score, incidents marked where they fired, and an incident table.",
    )
    r.add_argument("paths", nargs="+", metavar="PATH", help="recorded log files")
    r.add_argument("-o", "--output", default="report.html", metavar="FILE", help="HTML file")
    _indicator_option(
        r, "extra panel: an indicator (kl), a metric name or a glob (perf/*); repeatable"
    )
    r.add_argument("--config", metavar="FILE", help="TOML or JSON engine config")
    r.add_argument("--title", metavar="TEXT", help="the page's title (default: the runs' names)")
    r.add_argument(
        "--forecast-to",
        type=int,
        metavar="STEP",
        help="forecast the final train reward and held-out at this step of the runs that have "
        "not reached it (default: none; another run's length is not a run's horizon)",
    )
    _drawing_options(r, default_points=2000)

    c = subparsers.add_parser(
        "compare",
        help="compare a candidate against a baseline: better / worse / indistinguishable",
        description="Align runs by step and say, per indicator, whether the candidate is "
        "better, worse, different or indistinguishable, from which step, and by how much "
        "(effect with an interval). Several runs per side (seeds) are tested against "
        "between-seed variation; one run per side only against within-run noise.",
    )
    c.add_argument(
        "-b", "--baseline", nargs="+", required=True, metavar="PATH", help="baseline log file(s)"
    )
    c.add_argument(
        "-c", "--candidate", nargs="+", required=True, metavar="PATH", help="candidate log file(s)"
    )
    c.add_argument("-o", "--output", metavar="FILE", help="write overlay plots (HTML) here")
    _indicator_option(
        c, "compare only these indicators or metric names (repeatable; default: all logged)"
    )
    c.add_argument("--window", type=int, metavar="STEPS", help="steps per window (default: auto)")
    c.add_argument("--alpha", type=float, default=0.05, help="family-wise error rate (0.05)")
    c.add_argument("--config", metavar="FILE", help="TOML or JSON config (indicator aliases)")
    c.add_argument("--fail-on-worse", action="store_true", help="exit 1 if any indicator is worse")
    _drawing_options(c, default_points=1000)
    _add_ledger(subparsers)


def _add_ledger(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "ledger",
        help=LEDGER_HELP,
        description="An intervention ledger: per candidate (one intervention each) and "
        "indicator, the effect at matched steps with an interval and better / worse / not "
        "distinguishable from the baseline's seed spread, corrected for the number of "
        "comparisons; candidates ranked; those still running judged on the steps they have, "
        "with a forecast of their final reward and held-out. A selector is a file pattern "
        "(matched against the file's path and name and the run id) or tag:KEY=VALUE.",
    )
    p.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="recorded log files (default: the files the selectors' patterns name)",
    )
    p.add_argument(
        "-b",
        "--baseline",
        nargs="+",
        required=True,
        metavar="SELECTOR",
        help="the baseline's runs (several seeds: their spread is the noise)",
    )
    p.add_argument(
        "-c",
        "--candidate",
        nargs=2,
        action="append",
        required=True,
        metavar=("[NAME=]SELECTOR", "DESCRIPTION"),
        help="a candidate's runs and its intervention in one line (repeatable)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write the ledger page (HTML) here")
    p.add_argument(
        "--correction",
        choices=list(CORRECTIONS),
        default="holm",
        help="holm: family-wise error rate (default); bh: Benjamini-Hochberg false discovery rate",
    )
    p.add_argument("--alpha", type=float, default=0.05, help="error rate of the family (0.05)")
    p.add_argument("--window", type=int, metavar="STEPS", help="steps per window (default: auto)")
    _indicator_option(
        p, "judge these indicators or metric names instead of the default set (repeatable)"
    )
    p.add_argument("--config", metavar="FILE", help="TOML or JSON config (indicator aliases)")
    p.add_argument("--fail-on-worse", action="store_true", help="exit 1 if any verdict is worse")
    p.add_argument(
        "--refresh",
        type=float,
        metavar="SECONDS",
        help="a live view: read the files again and rewrite the page (-o) every SECONDS, "
        "until interrupted",
    )
    _drawing_options(p, default_points=1000)


def _indicator_option(p: argparse.ArgumentParser, text: str) -> None:
    p.add_argument("--indicator", action="append", default=[], metavar="NAME", help=text)


def _drawing_options(p: argparse.ArgumentParser, default_points: int) -> None:
    p.add_argument(
        "--max-points",
        type=int,
        default=default_points,
        metavar="N",
        help=f"most points drawn per series (spikes kept; default {default_points})",
    )
    p.add_argument(
        "--plain-js",
        action="store_true",
        help="embed plotly.js uncompressed (+2.9 MB) for browsers without DecompressionStream",
    )


def run_report_command(args: argparse.Namespace) -> int | None:
    """Run ``report`` or ``compare``; None if ``args.command`` is neither."""
    command = getattr(args, "command", None)
    if command not in ("report", "compare", "ledger"):
        return None
    try:
        if command == "ledger":
            return run_ledger(args)
        return _report(args) if command == "report" else _compare(args)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "plotly").partition(".")[0]
        print(
            f"streamwatch: '{command}' needs {missing}: {install_hint('report')}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    except ImportError as exc:
        print(f"streamwatch: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _report(args: argparse.Namespace) -> int:
    from streamwatch.report.html import build_report

    if args.max_points < 4:
        raise ValueError(f"--max-points must be >= 4, got {args.max_points}")
    summary = build_report(
        [Path(p) for p in args.paths],
        Path(args.output),
        indicators=args.indicator,
        config=load_offline_config(args.config, "report"),
        max_points=args.max_points,
        js="plain" if args.plain_js else "gzip",
        title=args.title,
        forecast_to=args.forecast_to,
    )
    print(
        f"wrote {summary.path} ({summary.bytes / 1e6:.1f} MB): {summary.runs} run(s), "
        f"{summary.panels} panels, {summary.incidents} incident update(s), "
        f"{summary.points:,} points, in {summary.seconds:.1f} s"
    )
    events = summary.events if summary.runs else 0
    if events == 0:
        print(
            "streamwatch: no metrics were read from the logs: nothing was checked",
            file=sys.stderr,
        )
    # as replay's: no event read is not a pass
    return exit_code(events=1 if events is None else events, worst=None, fail_on=None)


def _compare(args: argparse.Namespace) -> int:
    from streamwatch.report.compare_files import compare
    from streamwatch.report.compare_plot import write_comparison
    from streamwatch.report.table import format_table

    result = compare(
        [Path(p) for p in args.baseline],
        [Path(p) for p in args.candidate],
        indicators=args.indicator,
        config=load_offline_config(args.config, "compare"),
        window=args.window,
        alpha=args.alpha,
    )
    if args.output:
        out = Path(args.output)
        write_comparison(
            result, out, max_points=args.max_points, js="plain" if args.plain_js else "gzip"
        )
        result = replace(result, out=out)
    print(format_table(result))
    if args.fail_on_worse and result.worse():
        return EXIT_WORSE
    return EXIT_OK
