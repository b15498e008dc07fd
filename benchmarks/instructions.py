"""Instructions the engine spends per pass, counted by valgrind's callgrind: a figure that does
not swing with the machine's load, for comparing two builds or two commits side by side.

    python benchmarks/instructions.py [--tree DIR ...] [--passes 2 | --steady F]

Inputs: the RL-check series of 8 simulated runs (4,000 events, as ``throughput.py`` builds
them); the six real verl runs to 300 steps (``throughput.py``'s ``real``, one copy); a real
verl console log of the corpus (160 events); 20,000 events as ``service.py`` fills its topic
(20 metrics, 50 runs). The events are read first, then run
through a fresh Monitor ``--passes`` times. On a compiled build only ``Monitor.process`` is
counted (callgrind's ``--toggle-collect`` on its C function); on the pure build, the count of
``passes + 1`` runs less that of one run, per pass (start-up differences of a few million
instructions remain in that figure). ``--steady F`` counts instead what a value costs once
every run is under way: one Monitor fed the first ``F`` of the events, then all of them; the
difference, per value of the rest (start-up and warm-ups cancel, in both builds). Each
``--tree`` is a checkout or a compiled build (``make compiled``: .compiled) whose
``streamwatch`` is imported; by default, this one. Needs valgrind; a run takes a few minutes.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from service import RUNS, event, metric_names
from throughput import build_real, build_rl

ROOT = Path(__file__).resolve().parent.parent
REAL_LOG = ROOT / "tests/data/real/runs/verl-opd-aime-qwen2-3b-do7bl4gg/output.log"
PROCESS = "CPyDef_monitor___Monitor___process"  # Monitor.process, compiled

LOOP = """
import sys
from streamwatch.engine.monitor import Monitor
from streamwatch.sources import FileSource
events = list(FileSource(sys.argv[1]))
for _ in range(int(sys.argv[2])):
    monitor = Monitor()
    for e in events:
        monitor.process(e)
"""

#: one Monitor fed the first ``argv[2]`` fraction of the events
UPTO = """
import sys
from streamwatch.engine.monitor import Monitor
from streamwatch.sources import FileSource
events = list(FileSource(sys.argv[1]))
monitor = Monitor()
for e in events[: int(len(events) * float(sys.argv[2]))]:
    monitor.process(e)
"""


def build_service(path: Path, events: int = 20_000) -> None:
    names = metric_names(20)
    rng = random.Random(0)
    with path.open("wb") as out:
        for i in range(events):
            run, step = i % RUNS, i // RUNS
            out.write(event(run, step, names, rng, 1.0e9 + 30.0 * step) + b"\n")


def compiled(tree: Path) -> bool:
    code = "import streamwatch; print(streamwatch.build())"
    env = dict(os.environ, PYTHONPATH=str(tree))
    # run from the tree: ``-c`` puts the working directory first on the path
    run = subprocess.run
    out = run([sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True)
    return out.stdout.startswith("compiled")


def collected(tree: Path, loop: Path, data: Path, arg: float, toggle: bool) -> int:
    """Instructions counted running ``loop`` on ``data`` (``arg``: its passes, or the
    fraction of the events it feeds)."""
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    if toggle:
        cmd.append(f"--toggle-collect={PROCESS}")
    cmd += [sys.executable, str(loop), str(data), str(arg)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", out.stderr)
    if found is None:
        raise RuntimeError(f"no count from callgrind: {out.stderr[-500:]}")
    return int(found.group(1))


def per_pass(tree: Path, loop: Path, data: Path, passes: int) -> float:
    if compiled(tree):
        return collected(tree, loop, data, passes, True) / passes
    once = collected(tree, loop, data, 1, False)
    return (collected(tree, loop, data, passes + 1, False) - once) / passes


def per_value(tree: Path, upto: Path, data: Path, warm: float) -> float:
    """Instructions a value once under way: all the events less the first ``warm``."""
    from streamwatch.sources import FileSource

    events = list(FileSource(data))
    values = sum(len(e.metrics) for e in events[int(len(events) * warm) :])
    toggle = compiled(tree)
    counts = [collected(tree, upto, data, f, toggle) for f in (warm, 1.0)]
    return (counts[1] - counts[0]) / values


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", type=Path, action="append", help="checkouts or builds to count")
    p.add_argument("--passes", type=int, default=2)
    p.add_argument(
        "--steady", type=float, metavar="F", help="instructions a value after the first F"
    )
    args = p.parse_args()
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)")
        return 1
    trees = [t.resolve() for t in args.tree or [ROOT]]
    with tempfile.TemporaryDirectory() as tmp:
        loop = Path(tmp) / "loop.py"
        loop.write_text(LOOP if args.steady is None else UPTO)
        rl, service = Path(tmp) / "rl.jsonl", Path(tmp) / "service.jsonl"
        real = Path(tmp) / "real.jsonl"
        build_rl(rl, 500, 8)
        build_real(real, 300, 1)
        build_service(service)
        inputs = {"rl": rl, "real": real, "verl log": REAL_LOG, "service": service}
        if args.steady is None:
            print(f"# instructions per pass of Monitor.process ({args.passes} passes)")
        else:
            print(f"# instructions per value of Monitor.process after the first {args.steady:g}")
        for tree in trees:
            build = "compiled" if compiled(tree) else "pure"
            for name, data in inputs.items():
                if args.steady is None:
                    count = per_pass(tree, loop, data, args.passes)
                    print(f"{tree!s:<40} {build:<9} {name:<9} {count / 1e6:>10,.1f}M")
                else:
                    each = per_value(tree, loop, data, args.steady)
                    print(f"{tree!s:<40} {build:<9} {name:<9} {each:>10,.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
