"""A plain training loop (no framework) that publishes its metrics and stops when asked.

    python -m producers.training_loop --bootstrap-servers 127.0.0.1:19092 \\
        [--run-id loop-0] [--steps 300] [--step-seconds 0.05] [--collapse-at STEP]

What a hand-written GRPO loop does with the client: one :class:`Publisher` per process,
``log()`` once a step (it never blocks), ``stop_requested`` read once a step (an attribute),
a checkpoint written before leaving when a stop arrives, ``close()`` at the end. The
"training" is a toy: reward climbs, entropy decays; ``--collapse-at`` makes entropy fall
to nothing from that step, so that the service has something to stop. Environment fallback:
STREAMWATCH_BOOTSTRAP_SERVERS.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import time
from collections.abc import Sequence

from streamwatch.client.publish import Publisher

__all__ = ["main", "step_metrics"]


def step_metrics(step: int, rng: random.Random, collapse_at: int | None) -> dict[str, float]:
    """One step's metrics of the toy run (verl's names).

    >>> sorted(step_metrics(1, random.Random(0), None))
    ['actor/entropy', 'critic/score/mean', 'response_length/mean']
    """
    entropy = 0.6 * math.exp(-step / 2000) + rng.gauss(0, 0.01)
    if collapse_at is not None and step >= collapse_at:
        entropy *= math.exp(-(step - collapse_at) / 10)
    reward = 0.2 + 0.5 * (1 - math.exp(-step / 150)) + rng.gauss(0, 0.03)
    return {
        "actor/entropy": max(entropy, 1e-4),
        "critic/score/mean": reward,
        "response_length/mean": 400 + rng.gauss(0, 10),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m producers.training_loop")
    p.add_argument("--bootstrap-servers", default=os.environ.get("STREAMWATCH_BOOTSTRAP_SERVERS"))
    p.add_argument("--run-id", default="loop-0")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--step-seconds", type=float, default=0.05)
    p.add_argument("--collapse-at", type=int, default=None)
    p.add_argument("--checkpoint-dir", default="checkpoints")
    args = p.parse_args(argv)
    if not args.bootstrap_servers:
        p.error("--bootstrap-servers (or STREAMWATCH_BOOTSTRAP_SERVERS) is required")
    rng = random.Random(0)
    with Publisher(args.bootstrap_servers, args.run_id, stop_requests=True) as pub:
        for step in range(1, args.steps + 1):
            time.sleep(args.step_seconds)  # the forward, backward and optimizer step
            pub.log(step_metrics(step, rng, args.collapse_at), step=step)
            if pub.stop_requested:
                os.makedirs(args.checkpoint_dir, exist_ok=True)
                path = os.path.join(args.checkpoint_dir, f"step-{step}")
                with open(path, "w", encoding="utf-8") as f:
                    f.write(f"step {step}\n")
                print(f"stop requested ({pub.stop_reason}): checkpoint {path}, leaving")
                return 0
    print(f"trained {args.steps} steps; {pub.stats}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
