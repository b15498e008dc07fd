"""The HTML report at scale, and the calibration of ``compare`` on simulated seeds.

    python benchmarks/report.py [--steps 20000] [--runs 10] [--trials 200] [--opens 3]

1. Report: writes one recorded file of ``--runs`` simulated runs of ``--steps`` steps (two
   ranks each, a failure injected in every other run), builds the report and prints its
   size and build time; then opens it ``--opens`` times, each in a fresh headless Chromium
   (/usr/bin/chromium), and prints the median time from navigation to the figures in view
   drawn (``data-visible``: what a reader sees on opening) and to every figure drawn
   (``renderAll()``).
2. compare: over ``--trials`` trials, the share of comparisons of identical settings
   (different seeds) that flag any indicator (6 vs 6 seeds, and 1 vs 1), and the onset
   error for an injected entropy collapse (6 vs 6 seeds).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from streamwatch.report import RunData, SeriesCollector, build_report
from streamwatch.report.compare import compare_runs
from streamwatch.simulate import Fault, RunSpec, simulate, simulate_run, write_jsonl

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
KINDS = ("entropy_collapse", "length_explosion", "reward_hacking", "reward_chaos", "metric_spike")
SIZE_LIMIT, OPEN_LIMIT = 5_000_000, 5.0


def write_runs(path: Path, runs: int, steps: int) -> int:
    specs = []
    for i in range(runs):
        faults = (Fault(KINDS[i // 2 % len(KINDS)], int(steps * 0.6)),) if i % 2 else ()
        specs.append(RunSpec(f"run-{i:02d}", steps=steps, seed=i, ranks_per_host=1, faults=faults))
    return write_jsonl(simulate(specs), path)


def open_in_browser(path: Path) -> tuple[float, float, list[str]]:
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        start = time.perf_counter()
        page.goto(path.absolute().as_uri())
        page.wait_for_function("document.body.dataset.visible === '1'", polling=10)
        first = time.perf_counter() - start
        page.evaluate("window.streamwatchReport.renderAll()")
        page.wait_for_function("document.body.dataset.rendered === 'all'", polling=10)
        every = time.perf_counter() - start
        browser.close()
    return first, every, errors


def bench_report(steps: int, runs: int, opens: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "runs.jsonl"
        start = time.perf_counter()
        events = write_runs(log, runs, steps)
        print(
            f"input: {runs} runs x {steps:,} steps, {events:,} events, "
            f"{log.stat().st_size / 1e6:.0f} MB, written in {time.perf_counter() - start:.1f} s"
        )
        out = Path(tmp) / "report.html"
        s = build_report([log], out)
        ok = "ok" if s.bytes < SIZE_LIMIT else "OVER"
        print(
            f"report: {s.bytes / 1e6:.2f} MB ({ok}, limit {SIZE_LIMIT / 1e6:.0f} MB), "
            f"{s.figures} figures, {s.panels} panels, {s.points:,} points, "
            f"{s.incidents} incident updates; built in {s.seconds:.1f} s (replay included)"
        )
        if not opens:
            return
        if not os.path.exists(CHROMIUM):
            print(f"browser: skipped, {CHROMIUM} is absent")
            return
        runs_ = [open_in_browser(out) for _ in range(opens)]
        first = statistics.median(r[0] for r in runs_)
        every = statistics.median(r[1] for r in runs_)
        errors = sum(len(r[2]) for r in runs_)
        ok = "ok" if first < OPEN_LIMIT else "SLOW"
        print(
            f"browser, median of {opens} opens in a fresh headless Chromium: figures in view "
            f"drawn {first:.2f} s ({ok}, limit {OPEN_LIMIT:.0f} s), all {s.figures} drawn "
            f"{every:.2f} s; console errors: {errors}"
        )
        print("  each open (in view, all): " + ", ".join(f"{a:.2f}/{b:.2f}" for a, b, _ in runs_))


def seeds(prefix: str, first: int, n: int, *faults: Fault) -> dict[str, RunData]:
    collector = SeriesCollector()
    for seed in range(first, first + n):
        spec = RunSpec(
            f"{prefix}-{seed}", steps=400, seed=seed, hosts=1, ranks_per_host=1, faults=faults
        )
        collector.add_all(simulate_run(spec))
    return collector.runs()


def bench_compare(trials: int) -> None:
    start = time.perf_counter()
    for n in (6, 1):
        flagged = 0
        for t in range(trials):
            base, cand = seeds("b", 10_000 + 1000 * t, n), seeds("c", 10_500 + 1000 * t, n)
            flagged += any(c.significant for c in compare_runs(base, cand).indicators)
        print(
            f"compare, identical settings, {n} vs {n} seed(s): {flagged}/{trials} trials "
            f"flag an indicator ({flagged / trials:.1%})"
        )
    errors, missed = [], 0
    for t in range(trials):
        onset = 150 + (37 * t) % 150
        base = seeds("b", 20_000 + 1000 * t, 6)
        cand = seeds("c", 20_500 + 1000 * t, 6, Fault("entropy_collapse", onset))
        entropy = compare_runs(base, cand).get("entropy")
        if entropy is None or entropy.onset_step is None or entropy.verdict.value != "worse":
            missed += 1
        else:
            errors.append(entropy.onset_step - onset)
    if errors:
        within = sum(abs(e) <= 20 for e in errors)
        spread = f"{min(errors):+d}..{max(errors):+d}"
        print(
            f"compare, entropy collapse, 6 vs 6 seeds: worse in {len(errors)}/{trials}; onset "
            f"error median {statistics.median(errors):+.0f}, range {spread} steps; "
            f"within 20 steps in {within}/{trials}"
        )
    print(f"# compare calibration: {time.perf_counter() - start:.0f} s")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20_000)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--trials", type=int, default=200, help="compare trials (0: skip)")
    p.add_argument("--opens", type=int, default=3, help="browser opens to time (0: skip)")
    args = p.parse_args()
    print(f"# {platform.python_implementation()} {platform.python_version()}, {platform.machine()}")
    print(f"# {platform.platform()}, {os.cpu_count()} CPUs")
    bench_report(args.steps, args.runs, args.opens)
    if args.trials:
        bench_compare(args.trials)


if __name__ == "__main__":
    main()
