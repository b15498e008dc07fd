"""What to try, per incident kind: suggestions practitioners and papers report to work."""

from __future__ import annotations

from typing import Final

REMEDIES: Final[dict[str, list[str]]] = {
    "entropy_collapse": [
        "raise the upper clip bound (clip-higher, e.g. eps_high 0.28)",
        "add an entropy bonus or adaptive entropy control (target ~0.2)",
        "try KL-Cov / Clip-Cov, or a higher sampling temperature",
        "check whether the reward is saturated (frac_reward_zero_std)",
    ],
    "entropy_blowup": [
        "use a token-level loss instead of a sample-level one",
        "lower the learning rate or the sampling temperature",
        "check the train/inference probability mismatch",
        "roll back to the last healthy checkpoint",
    ],
    "reward_chaos": [
        "lower the learning rate",
        "use a larger batch or more samples per prompt",
        "use dynamic sampling (drop zero-variance groups)",
        "check the reward function for non-determinism or timeouts",
    ],
    "reward_collapse": [
        "roll back to the checkpoint before the drop",
        "lower the learning rate; check for entropy collapse or blow-up alongside",
        "check the reward function and the data pipeline for a change",
    ],
    "length_explosion": [
        "add overlong reward shaping (a soft penalty buffer before the max length)",
        "mask truncated completions (overlong filtering)",
        "check samples for repetition loops",
    ],
    "truncation_saturation": [
        "add overlong reward shaping or overlong filtering",
        "raise the max response length, or lower it with a length penalty",
        "check samples for repetition loops",
    ],
    "length_collapse": [
        "check the reward for a bias towards short answers",
        "inspect samples for degenerate (empty or truncated) completions",
        "lower the learning rate",
    ],
    "reward_hacking": [
        "inspect samples for exploits of the reward function",
        "add or raise the KL penalty",
        "fix the reward function; early-stop at the held-out peak",
    ],
    "nonfinite_metric": [
        "skip the step; lower the learning rate",
        "check fp16/bf16 overflow and the reference model",
        "roll back to the last checkpoint with finite metrics",
    ],
    "metric_spike": [
        "restart from a checkpoint ~100 steps before the spike and skip the offending batches",
        "lower the learning rate or tighten gradient clipping",
        "check the data around the spike for corrupt samples",
    ],
    "run_stalled": [
        "check the processes (an NCCL timeout or a dead node hangs every rank)",
        "check the reward service and the rollout workers for a hang",
        "check that the metrics publisher still reaches the broker",
    ],
    "rank_straggler": [
        "check the slow host: GPU clocks and temperature, ECC errors, noisy neighbours",
        "check its network link and storage; move the rank off the host",
    ],
    "metric_drift": [
        "compare with the run's configuration and code changes at that step",
    ],
    "no_learning_signal": [
        "check the reward function on a few completions by hand (does it ever differ?)",
        "use dynamic sampling: drop groups whose completions all got the same reward",
        "raise the number of completions per prompt, or the sampling temperature",
        "check that gradients flow: the loss is not detached, the optimiser sees the params",
    ],
    "policy_mismatch": [
        "check that the rollout engine and the trainer use the same weights and dtype",
        "use truncated importance sampling (TIS) or masked importance sampling",
        "check the rollout engine's settings (sampling, precision, kernels) after an upgrade",
    ],
}
