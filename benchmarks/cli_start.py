"""How fast the ``streamwatch`` command starts: wall time of a fresh process per command,
and the heavy modules each one imports (none of river, scipy, numpy, plotly for these).

    python benchmarks/cli_start.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = [
    ["--help"],
    ["check-config", str(ROOT / "examples" / "streamwatch.toml")],
    ["test-route", "--help"],
    ["replay", "--help"],
]
_PROBE = (
    "import sys\n"
    "from streamwatch.cli.main import main\n"
    "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
    "heavy = {'river', 'scipy', 'numpy', 'plotly'}\n"
    "print(','.join(sorted({m.split('.')[0] for m in sys.modules} & heavy)) or '-',"
    " file=sys.stderr)\n"
)


def _time(argv: list[str], repeat: int) -> tuple[float, str]:
    times = []
    heavy = ""
    command = [sys.executable, "-m", "streamwatch.cli.main", *argv]
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, capture_output=True, cwd=ROOT, check=False, timeout=60)
        times.append(time.perf_counter() - start)
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, cwd=ROOT
    )
    heavy = probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else "?"
    return statistics.median(times), heavy


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeat", type=int, default=7, help="fresh processes per command")
    args = p.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, median of {args.repeat}")
    print(f"{'command':<48} {'seconds':>8}  heavy modules imported")
    for argv in COMMANDS:
        seconds, heavy = _time(argv, args.repeat)
        shown = " ".join(a if len(a) < 30 else Path(a).name for a in argv)
        print(f"streamwatch {shown:<36} {seconds:8.3f}  {heavy}")


if __name__ == "__main__":
    main()
