"""The embedded default: a small simulated cluster with a few failures."""

from __future__ import annotations

from streamwatch.simulate import Fault, RunSpec


def demo_specs(steps: int = 400, seed: int = 7) -> list[RunSpec]:
    """Four runs on 2 hosts x 2 ranks: three fail in different ways, one stays healthy."""

    def at(frac: float) -> int:
        return max(1, int(steps * frac))

    return [
        RunSpec(
            "grpo-qwen7b-a",
            steps=steps,
            finished_marker=True,
            seed=seed,
            faults=(Fault("nonfinite_metric", at(0.2)), Fault("entropy_collapse", at(0.5))),
        ),
        RunSpec(
            "grpo-qwen7b-b",
            steps=steps,
            finished_marker=True,
            seed=seed + 1,
            faults=(Fault("reward_hacking", at(0.45)),),
        ),
        RunSpec(
            "dapo-qwen32b-c",
            steps=steps,
            finished_marker=True,
            seed=seed + 2,
            faults=(Fault("rank_straggler", at(0.3)), Fault("length_explosion", at(0.6))),
        ),
        RunSpec("grpo-qwen3b-d", steps=steps, finished_marker=True, seed=seed + 3),
    ]
