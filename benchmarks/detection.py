"""Detection quality on the simulator: per failure kind, detection rate, median delay and
false alarms over N seeds with the onset at a random step, for fast faults and for gradual
ones (the full effect builds linearly over 50-100 steps drawn from the seed; the delay is
counted from the onset); plus healthy runs.

    python benchmarks/detection.py [--seeds 30] [--strength 1.0] [--kinds a,b]
                                   [--forms fast,gradual]
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time
from collections.abc import Sequence

from streamwatch.simulate import FAULT_KINDS, GRADUAL_KINDS, RAMP_RANGE
from streamwatch.simulate.scoring import score_healthy, score_kind

_UNIT = {"run_stalled": "cadences", "reward_hacking": "evals"}
_FORMS = ("fast", "gradual")


def _header(title: str) -> None:
    print(f"\n## {title}")
    head = f"{'kind':<24}{'detected':>10}{'median delay':>16}{'max delay':>11}"
    print(f"{head}{'clean before onset':>20}{'warning+ (median)':>20}")


def _table(kinds: Sequence[str], seeds: Sequence[int], strength: float, gradual: bool) -> None:
    low, high = RAMP_RANGE
    _header(f"gradual faults (ramp {low}-{high} steps)" if gradual else "fast faults")
    shares: list[str] = []
    for kind in kinds:
        if gradual and kind not in GRADUAL_KINDS:
            print(f"{kind:<24}  no gradual form (see the fast table)")
            continue
        s = score_kind(kind, seeds, strength=strength, gradual=gradual)
        delay = f"{s.median_delay:.1f} {_UNIT.get(kind, 'steps')}" if s.delays else "-"
        worst = f"{max(s.delays):.1f}" if s.delays else "-"
        warned = f"{len(s.serious_delays)}/{s.runs}"
        if s.serious_delays:
            warned += f" {s.median_serious_delay:.1f}"
        print(
            f"{kind:<24}{s.detected:>5}/{s.runs:<4}{delay:>16}{worst:>11}{s.clean_fraction:>19.0%}"
            f"{warned:>20}"
        )
        for fa in s.false_alarms[:3]:
            print(f"    false alarm {fa}")
        if s.missed_seeds:
            print(f"    missed seeds {s.missed_seeds[:10]}")
        if not math.isnan(s.median_delay_share):
            shares.append(f"{kind} {s.median_delay_share:.0%}")
    if shares:
        print(f"# median delay / ramp: {', '.join(shares)}")


def chaos_bound(strength: float, nats: float = math.log(100)) -> float:
    """Steps after the onset at which even an observer that knows the gradual reward-chaos
    ramp exactly has gathered ``nats`` of expected evidence (the Kullback-Leibler divergence
    of the noisier reward from the healthy one, summed over the steps): the median over the
    simulator's ramps. No detector with a 1% false-alarm rate can be faster on average
    (Wald). The fault (``streamwatch/simulate/faults.py``): the reward's sd grows to
    ``1 + 3 strength`` times its own, its variance linearly in the ramp's progress w
    squared."""
    low, high = RAMP_RANGE
    grow = (1.0 + 3.0 * strength) ** 2 - 1.0
    delays = []
    for ramp in range(low, high + 1):
        evidence, t = 0.0, 0
        while evidence < nats:
            t += 1
            v = 1.0 + grow * min(1.0, t / ramp) ** 2  # variance ratio at step t
            evidence += 0.5 * (v - 1.0 - math.log(v))
        delays.append(t)
    return float(statistics.median(delays))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=30)
    p.add_argument("--strength", type=float, default=1.0)
    p.add_argument("--kinds", default=",".join(FAULT_KINDS))
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--forms", default=",".join(_FORMS), help="fast, gradual or both")
    args = p.parse_args()
    forms = args.forms.split(",")
    if unknown := set(forms) - set(_FORMS):
        p.error(f"--forms: unknown {sorted(unknown)}; known: {', '.join(_FORMS)}")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    kinds = args.kinds.split(",")
    print(f"# detection on the simulator: {args.seeds} seeds, strength {args.strength}")
    print(f"# {platform.python_implementation()} {platform.python_version()}, {platform.machine()}")
    start = time.perf_counter()
    for form in _FORMS:
        if form in forms:
            _table(kinds, seeds, args.strength, gradual=form == "gradual")
            if form == "gradual" and "reward_chaos" in kinds:
                bound = chaos_bound(args.strength)
                print(
                    f"# gradual reward_chaos: an observer knowing the ramp needs {bound:.0f} "
                    "steps (median) for the evidence of a 1% false-alarm rate"
                )
    _header("healthy runs")
    h = score_healthy(seeds)
    print(f"{'healthy runs':<24}{'':>10}{'':>16}{'':>11}{h.clean_fraction:>19.0%}")
    for fa in h.false_alarms[:5]:
        print(f"    false alarm {fa}")
    print(f"# {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
