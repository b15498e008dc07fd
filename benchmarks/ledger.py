"""The intervention ledger on null sweeps: seeds of one simulated setup split into a
baseline and candidates that change nothing, so that every verdict but "not
distinguishable" is false. Prints, per design, the share of verdicts that are "not
distinguishable" (the target: at least 95%) and the false ones.

    python benchmarks/ledger.py [--sweeps 4] [--steps 300]

Designs: 3 baseline seeds against 6 single-seed candidates (verl names), the same with
TRL's names (which log the reward's std), 3 against 3 candidates of 2 seeds each with two of
them still running (cut at half the steps), the same under Benjamini-Hochberg, and, for
contrast, 1 baseline run against 3 single runs (no seed spread: within-run noise only). Then
the power: how often an entropy collapse injected into every candidate is found.
"""

from __future__ import annotations

import argparse
import time

from streamwatch.ledger.calibration import null_sweep
from streamwatch.report.policy import Verdict
from streamwatch.simulate import Fault

DESIGNS = (
    ("3 vs 6x1, verl, Holm", {"baseline": 3, "per_candidate": 1, "n": 9}),
    ("3 vs 6x1, trl, Holm", {"baseline": 3, "per_candidate": 1, "n": 9, "framework": "trl"}),
    ("3 vs 3x2, 2 running, Holm", {"baseline": 3, "per_candidate": 2, "n": 9, "running": 2}),
    (
        "3 vs 3x2, 2 running, BH",
        {"baseline": 3, "per_candidate": 2, "n": 9, "running": 2, "correction": "bh"},
    ),
    ("1 vs 3x1, Holm (no seed spread)", {"baseline": 1, "per_candidate": 1, "n": 4}),
)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sweeps", type=int, default=4, help="sweeps per design")
    p.add_argument("--steps", type=int, default=300)
    args = p.parse_args()
    start = time.perf_counter()
    seed = 5000
    total = calibrated = 0
    print(f"{'design':34} {'sweeps':>6} {'verdicts':>8} {'not distinguishable':>20}  false")
    for name, d in DESIGNS:
        opts = {k: v for k, v in d.items() if k != "n"}
        n = int(d["n"])  # type: ignore[call-overload]
        verdicts = nd = 0
        false: list[str] = []
        for _ in range(args.sweeps):
            sweep = null_sweep(range(seed, seed + n), steps=args.steps, **opts)  # type: ignore[arg-type]
            seed += n
            verdicts += sweep.verdicts
            nd += round(sweep.share_not_distinguishable * sweep.verdicts)
            false.extend(f"{ind}={v}" for _, ind, v in sweep.false)
        share = nd / max(verdicts, 1)
        if d["baseline"] > 1:  # type: ignore[operator]
            total += verdicts
            calibrated += nd
        shown = ", ".join(false[:6]) + (f", ... ({len(false)})" if len(false) > 6 else "")
        print(f"{name:34} {args.sweeps:>6} {verdicts:>8} {share:>19.1%}  {shown or '-'}")
    print(
        f"designs with a seed spread: {calibrated}/{total} = {calibrated / max(total, 1):.1%} "
        "not distinguishable (target >= 95%)"
    )
    power(args.sweeps, args.steps, seed)
    print(f"# {time.perf_counter() - start:.0f} s")


def power(sweeps: int, steps: int, seed: int) -> None:
    """The other side of calibration: candidates of 2 seeds whose entropy collapses at 40% of
    the run, against 3 baseline seeds. How often is entropy found worse?"""
    found = total = 0
    for _ in range(sweeps):
        fault = Fault("entropy_collapse", int(0.4 * steps))
        sweep = null_sweep(
            range(seed, seed + 9),
            baseline=3,
            per_candidate=2,
            steps=steps,
            candidate_faults=(fault,),
        )
        seed += 9
        for e in sweep.ledger.entries:
            total += 1
            found += e.verdicts().get("entropy") is Verdict.WORSE
    print(
        f"power: entropy collapse at 40% of the run, 2 seeds vs 3: entropy worse for {found}/"
        f"{total} candidates"
    )


if __name__ == "__main__":
    main()
