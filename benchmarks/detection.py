"""Detection quality on the simulator: per failure kind, detection rate, median delay and
false alarms over N seeds with the onset at a random step; plus healthy runs.

    python benchmarks/detection.py [--seeds 30] [--strength 1.0] [--kinds a,b]
"""

from __future__ import annotations

import argparse
import platform
import time

from streamwatch.scoring import score_healthy, score_kind
from streamwatch.simulate import FAULT_KINDS


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=30)
    p.add_argument("--strength", type=float, default=1.0)
    p.add_argument("--kinds", default=",".join(FAULT_KINDS))
    p.add_argument("--first-seed", type=int, default=0)
    args = p.parse_args()
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    print(f"# detection on the simulator: {args.seeds} seeds, strength {args.strength}")
    print(f"# {platform.python_implementation()} {platform.python_version()}, {platform.machine()}")
    unit = {"run_stalled": "cadences", "reward_hacking": "evals"}
    head = f"{'kind':<24}{'detected':>10}{'median delay':>16}{'max delay':>11}"
    print(f"{head}{'clean before onset':>20}")
    start = time.perf_counter()
    for kind in args.kinds.split(","):
        s = score_kind(kind, seeds, strength=args.strength)
        delay = f"{s.median_delay:.1f} {unit.get(kind, 'steps')}"
        worst = f"{max(s.delays):.1f}" if s.delays else "-"
        print(
            f"{kind:<24}{s.detected:>5}/{s.runs:<4}{delay:>16}{worst:>11}{s.clean_fraction:>19.0%}"
        )
        for fa in s.false_alarms[:3]:
            print(f"    false alarm {fa}")
        if s.missed_seeds:
            print(f"    missed seeds {s.missed_seeds[:10]}")
    h = score_healthy(seeds)
    print(f"{'healthy runs':<24}{'':>10}{'':>16}{'':>11}{h.clean_fraction:>19.0%}")
    for fa in h.false_alarms[:5]:
        print(f"    false alarm {fa}")
    print(f"# {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
