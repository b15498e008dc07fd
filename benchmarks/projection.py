"""Projections on simulated failures that build: per projected kind, how many incidents got
a projection, and how close the projected crossing step came to the actual one.

A projection is made when an incident of entropy collapse, length explosion, truncation
saturation or reward hacking is raised or updated, and shown only when its fit is good
(``streamwatch/engine/projection.py``); the actual crossing is the first later step at which the
series' centred 5-value median passes the projected level
(``streamwatch/simulate/scoring_projection.py``).

    python benchmarks/projection.py [--seeds 30] [--first-seed 0] [--forms gradual,fast]
"""

from __future__ import annotations

import argparse
import platform
import time

from streamwatch.engine.projection import PROJECTED
from streamwatch.simulate.scoring_projection import ProjectionScore, score_projection

_FORMS = ("gradual", "fast")


def _row(s: ProjectionScore) -> str:
    judged = len(s.judged)
    return (
        f"{s.kind:<24}{s.raised:>4}/{s.runs:<4}{s.shown:>7}{judged:>8}"
        f"{s.share('step'):>12.0%}{s.share('horizon'):>12.0%}{s.share('cover'):>10.0%}"
        f"{s.median_abs_error:>10.1f}"
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=30)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--forms", default="gradual,fast", help="gradual, fast or both")
    args = p.parse_args()
    forms = args.forms.split(",")
    if unknown := set(forms) - set(_FORMS):
        p.error(f"--forms: unknown {sorted(unknown)}; known: {', '.join(_FORMS)}")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    print(f"# projections on the simulator: {args.seeds} seeds from {args.first_seed}")
    print(f"# {platform.python_implementation()} {platform.python_version()}, {platform.machine()}")
    start = time.perf_counter()
    for form in (f for f in _FORMS if f in forms):
        print(f"\n## {form} faults" + (" (ramp 50-100 steps)" if form == "gradual" else ""))
        head = f"{'kind':<24}{'raised':>9}{'shown':>7}{'judged':>8}"
        print(f"{head}{'<=20% step':>12}{'<=20% ahead':>12}{'covered':>10}{'|err| med':>10}")
        total = ProjectionScore("all")
        for kind in PROJECTED:
            s = score_projection(kind, seeds, gradual=form == "gradual")
            print(_row(s))
            total.runs += s.runs
            total.raised += s.raised
            total.judged += s.judged
            total.unjudged += s.unjudged
        print(_row(total))
    print(
        "\n# shown: incidents with a projection; judged: those whose run crossed, or whose "
        "projected step came before the run ended;\n# <=20% step: within 20% of the actual "
        "crossing step (the bar: 80%); <=20% ahead: within 20% of the steps it looked "
        "ahead;\n# covered: the actual step inside the interval; |err| med: median error, steps"
    )
    print(f"# {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
