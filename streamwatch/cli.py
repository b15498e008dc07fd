"""The ``streamwatch`` command."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from streamwatch import __version__
from streamwatch.alerting.cli import (
    add_alert_args,
    add_silence_commands,
    add_test_route_command,
    build_dispatcher,
    run_silence_command,
    run_test_route,
)
from streamwatch.alerting.dispatcher import Dispatcher
from streamwatch.cli_kafka import add_commands as add_kafka_commands
from streamwatch.cli_kafka import dispatch as dispatch_kafka_command
from streamwatch.config import Config, ConfigError, load_config
from streamwatch.incidents import KINDS, Severity, Status
from streamwatch.replay import format_summary, progress_stream, replay_files
from streamwatch.report.cli import add_report_commands, run_report_command
from streamwatch.simulate import Fault
from streamwatch.sinks import ConsoleSink, JsonlSink

__all__ = ["main"]

EXIT_OK, EXIT_INCIDENT, EXIT_USAGE = 0, 1, 2


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"STREAMWATCH_{name}", default)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="streamwatch",
        description="Health monitor for RL training of language models.",
    )
    p.add_argument("--version", action="version", version=f"streamwatch {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("replay", help="replay recorded logs through the engine")
    r.add_argument("paths", nargs="+", metavar="PATH", help="recorded log files")
    r.add_argument("--incidents-out", metavar="FILE", help="write incident updates as JSONL")
    r.add_argument("--config", metavar="FILE", default=_env("CONFIG"), help="TOML or JSON")
    r.add_argument(
        "--fail-on",
        choices=[s.value for s in Severity],
        metavar="SEVERITY",
        help="exit 1 if an incident of this severity or worse fires (info|warning|critical)",
    )
    r.add_argument(
        "--format", choices=["streamwatch", "verl", "hf", "wandb"], help="skip detection"
    )
    r.add_argument("--quiet", action="store_true", help="no live incident lines, summary only")
    add_alert_args(r)

    d = sub.add_parser("demo", help="a simulated multi-node cluster with failures, no Kafka")
    d.add_argument("--steps", type=int, default=400)
    d.add_argument("--seed", type=int, default=7)
    d.add_argument("--pace", type=float, default=0.0, metavar="SECONDS", help="wall time per step")
    d.add_argument("--incidents-out", metavar="FILE")
    d.add_argument("--config", metavar="FILE", default=_env("CONFIG"))
    add_alert_args(d)

    s = sub.add_parser("simulate", help="write simulated runs to a JSONL file")
    s.add_argument("-o", "--output", required=True, metavar="FILE")
    s.add_argument("--runs", type=int, default=1)
    s.add_argument("--steps", type=int, default=400)
    s.add_argument("--hosts", type=int, default=2)
    s.add_argument("--ranks-per-host", type=int, default=2)
    s.add_argument("--eval-every", type=int, default=10)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--framework", choices=["verl", "trl"], default="verl")
    s.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND@STEP[:STRENGTH][~RAMP][/RUN]",
        help=f"inject a failure (repeatable; ~RAMP: gradual over RAMP steps); kinds: "
        f"{', '.join(KINDS)}",
    )

    c = sub.add_parser("check-config", help="validate a config file offline")
    c.add_argument("path", metavar="FILE")
    add_silence_commands(sub)
    add_test_route_command(sub)
    add_report_commands(sub)
    add_kafka_commands(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        code = run_report_command(args)
        if code is None:
            code = dispatch_kafka_command(args)
        if code is not None:
            return code
        if args.command == "replay":
            return _replay(args)
        if args.command == "demo":
            return _demo(args)
        if args.command == "simulate":
            return _simulate(args)
        if args.command == "check-config":
            return _check_config(args)
        if args.command == "silence":
            return run_silence_command(args)
        if args.command == "test-route":
            return run_test_route(args)
    except ConfigError as exc:
        print(f"streamwatch: config error:\n{exc}", file=sys.stderr)
        return EXIT_USAGE
    except (FileNotFoundError, IsADirectoryError, ValueError) as exc:
        print(f"streamwatch: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    raise AssertionError(args.command)


def _replay(args: argparse.Namespace) -> int:
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
    try:
        result = replay_files(
            args.paths, config, sinks=sinks, format=args.format, progress=progress_stream()
        )
    finally:
        if jsonl is not None:
            jsonl.close()
        if alerts is not None:  # returns once every alert is delivered or spooled
            print(alerts.close(timeout=30), file=sys.stderr)
    print(format_summary(result))
    if args.fail_on:
        limit = Severity(args.fail_on)
        worst = result.worst()
        if worst is not None and worst.rank >= limit.rank:
            print(f"streamwatch: failing: a {worst.value} incident fired", file=sys.stderr)
            return EXIT_INCIDENT
    return EXIT_OK


def _demo(args: argparse.Namespace) -> int:
    from streamwatch.demo import demo_specs
    from streamwatch.monitor import Monitor
    from streamwatch.simulate import simulate

    config: Config = load_config(args.config)
    specs = demo_specs(args.steps, args.seed)
    print(f"streamwatch demo: {len(specs)} simulated runs on 2 hosts x 2 ranks, {args.steps} steps")
    for spec in specs:
        faults = ", ".join(f"{f.kind} at step {f.step}" for f in spec.faults) or "healthy"
        print(f"  {spec.run_id}: {faults}")
    print()
    monitor = Monitor(config)
    console = ConsoleSink(sys.stdout)
    jsonl = JsonlSink(args.incidents_out) if args.incidents_out else None
    alerts = build_dispatcher(args, config.alerting)
    last_step = -1
    fired = 0
    for event in simulate(specs):
        if args.pace and event.step > last_step:
            time.sleep(args.pace)
        last_step = max(last_step, event.step)
        for inc in monitor.process(event):
            fired += inc.status is Status.FIRING
            console.send(inc)
            if jsonl is not None:
                jsonl.send(inc)
            if alerts is not None:
                alerts.send(inc)
    for inc in monitor.flush():
        console.send(inc)
    if jsonl is not None:
        jsonl.close()
    if alerts is not None:
        print(alerts.close(timeout=30), file=sys.stderr)
    s = monitor.stats
    print(f"\n{s.events:,} events, {s.values:,} values, {fired} incidents fired")
    return EXIT_OK


def _simulate(args: argparse.Namespace) -> int:
    from streamwatch.simulate import RunSpec, simulate, write_jsonl

    faults: dict[int, list[Fault]] = {}
    for text in args.fault:
        run, fault = _parse_fault(text)
        faults.setdefault(run, []).append(fault)
    specs = [
        RunSpec(
            run_id=f"sim-{args.seed}-{i}",
            steps=args.steps,
            hosts=args.hosts,
            ranks_per_host=args.ranks_per_host,
            eval_every=args.eval_every,
            seed=args.seed * 1000 + i,
            faults=tuple(faults.get(i, ())),
            framework=args.framework,
            finished_marker=True,
        )
        for i in range(args.runs)
    ]
    n = write_jsonl(simulate(specs), Path(args.output))
    print(f"wrote {n:,} events of {len(specs)} run(s) to {args.output}")
    return EXIT_OK


def _parse_fault(text: str) -> tuple[int, Fault]:
    spec, _, run = text.partition("/")
    kind, at, rest = spec.partition("@")
    if not at or kind not in KINDS:
        raise ValueError(
            f"--fault {text!r}: expected KIND@STEP[:STRENGTH][~RAMP][/RUN], kinds: {KINDS}"
        )
    rest, tilde, ramp_text = rest.partition("~")
    step_text, _, strength_text = rest.partition(":")
    try:
        step = int(step_text)
        strength = float(strength_text) if strength_text else 1.0
        ramp = int(ramp_text) if tilde else None
        run_index = int(run) if run else 0
    except ValueError as exc:
        raise ValueError(f"--fault {text!r}: step, strength, ramp and run must be numbers") from exc
    try:
        return run_index, Fault(kind=kind, step=step, strength=strength, ramp=ramp)
    except ValueError as exc:
        raise ValueError(f"--fault {text!r}: {exc}") from exc


def _check_config(args: argparse.Namespace) -> int:
    config = load_config(args.path)
    print(f"{args.path}: ok")
    engine = config.engine
    print(f"  resolve_after={engine.resolve_after}, disabled kinds: {list(engine.disabled_kinds)}")
    aliases = config.indicators.aliases
    print(f"  indicator presets: {', '.join(config.indicators.presets)}; aliases: {len(aliases)}")
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
