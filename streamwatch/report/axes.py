"""What a panel's vertical axis shows: the quantity and its unit.

An indicator has a known unit (response length in tokens, entropy in nats per token, step
time in seconds); a reward's scale is the reward function's own, so it has none. A metric no
indicator reads gets a unit only where its name says one (``timing_s/gen``: seconds).

>>> axis_title("actor/entropy", "entropy")
'entropy (nats/token)'
>>> axis_title("critic/score/mean", "train_reward")
'train reward'
>>> axis_title("timing_s/gen", None)
'timing_s/gen (s)'
>>> axis_title("val-core/openai/gsm8k/reward/mean@1", None)
'…/gsm8k/reward/mean@1'
"""

from __future__ import annotations

import re

__all__ = ["UNITS", "axis_title"]

#: indicator -> the unit its values are in ("" when the values have none of their own)
UNITS = {
    "response_length": "tokens",
    "response_length_max": "tokens",
    "response_length_min": "tokens",
    "truncation_ratio": "fraction cut at the cap",
    "train_reward": "",
    "reward_std": "",
    "reward_max": "",
    "reward_min": "",
    "heldout_reward": "",
    "entropy": "nats/token",
    "token_prob": "probability",
    "kl": "nats",
    "grad_norm": "L2 norm",
    "loss": "",
    "step_time": "s",
    "throughput": "tokens/s",
    "zero_variance_groups": "fraction of groups",
    "clip_fraction": "fraction of tokens",
    "prob_mismatch": "",
}
#: a unit a metric's own name says, first match
_NAMED = (
    (re.compile(r"(^|[/_])(timing_s|time_s|seconds?|secs?)([/_]|$)|_s$"), "s"),
    (re.compile(r"(^|[/_])(timing_ms|ms)([/_]|$)|_ms$"), "ms"),
    (re.compile(r"_gb$|(^|[/_])gb([/_]|$)"), "GB"),
    (re.compile(r"tokens?_per_s(ec(ond)?)?|tokens?/s(ec)?$"), "tokens/s"),
)
_LONGEST = 24


def axis_title(metric: str, indicator: str | None) -> str:
    """The axis title: the indicator's name, else the metric's (its end, when long), and the
    unit in brackets when there is one."""
    if indicator is not None:
        label, unit = indicator.replace("_", " "), UNITS.get(indicator, "")
    else:
        label = metric if len(metric) <= _LONGEST else "…" + metric[-(_LONGEST - 4) :]
        lower = metric.lower()
        unit = next((u for pattern, u in _NAMED if pattern.search(lower)), "")
    return f"{label} ({unit})" if unit else label
