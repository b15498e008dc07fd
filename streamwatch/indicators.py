"""Canonical indicators and the metric names each framework logs them under.

A metric name resolves to at most one indicator. Presets cover verl, TRL, OpenRLHF and
NeMo RL; user aliases (config ``indicators.aliases``) come first. Patterns are shell-style
globs (``val-core/*/reward/mean@*``).

>>> IndicatorMap().resolve("actor/entropy")
<Indicator.ENTROPY: 'entropy'>
>>> IndicatorMap().resolve("val-core/openai/gsm8k/reward/mean@1")
<Indicator.HELDOUT_REWARD: 'heldout_reward'>
>>> IndicatorMap(aliases={"my/ent": "entropy"}).resolve("my/ent")
<Indicator.ENTROPY: 'entropy'>
>>> IndicatorMap().resolve("perf/mfu/actor") is None
True
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from enum import StrEnum

__all__ = ["PRESETS", "Indicator", "IndicatorMap"]


class Indicator(StrEnum):
    RESPONSE_LENGTH = "response_length"
    TRUNCATION_RATIO = "truncation_ratio"
    TRAIN_REWARD = "train_reward"
    REWARD_STD = "reward_std"
    ENTROPY = "entropy"
    TOKEN_PROB = "token_prob"
    HELDOUT_REWARD = "heldout_reward"
    KL = "kl"
    GRAD_NORM = "grad_norm"
    LOSS = "loss"
    STEP_TIME = "step_time"
    THROUGHPUT = "throughput"


_I = Indicator

#: framework -> ordered (pattern, indicator) pairs; the first matching pattern wins.
PRESETS: dict[str, tuple[tuple[str, Indicator], ...]] = {
    "verl": (
        ("actor/entropy", _I.ENTROPY),
        ("actor/entropy_loss", _I.ENTROPY),
        ("critic/score/mean", _I.TRAIN_REWARD),
        ("critic/rewards/mean", _I.TRAIN_REWARD),
        ("critic/score/std", _I.REWARD_STD),
        ("response_length/mean", _I.RESPONSE_LENGTH),
        ("response_length/clip_ratio", _I.TRUNCATION_RATIO),
        ("actor/kl_loss", _I.KL),
        ("actor/ppo_kl", _I.KL),
        ("actor/grad_norm", _I.GRAD_NORM),
        ("actor/pg_loss", _I.LOSS),
        ("val-core/*/reward/mean@*", _I.HELDOUT_REWARD),
        ("val-core/*", _I.HELDOUT_REWARD),
        ("val/test_score/*", _I.HELDOUT_REWARD),
        ("timing_s/step", _I.STEP_TIME),
        ("perf/throughput", _I.THROUGHPUT),
    ),
    "trl": (
        ("entropy", _I.ENTROPY),
        ("reward", _I.TRAIN_REWARD),
        ("rewards/*/mean", _I.TRAIN_REWARD),
        ("reward_std", _I.REWARD_STD),
        ("completions/mean_length", _I.RESPONSE_LENGTH),
        ("completions/clipped_ratio", _I.TRUNCATION_RATIO),
        ("kl", _I.KL),
        ("grad_norm", _I.GRAD_NORM),
        ("loss", _I.LOSS),
        ("eval_reward", _I.HELDOUT_REWARD),
        ("eval_accuracy", _I.HELDOUT_REWARD),
        ("eval_*reward*", _I.HELDOUT_REWARD),
        ("eval_*accuracy*", _I.HELDOUT_REWARD),
        ("train_samples_per_second", _I.THROUGHPUT),
    ),
    "openrlhf": (
        ("train/entropy_loss", _I.ENTROPY),
        ("train/reward", _I.TRAIN_REWARD),
        ("train/response_length", _I.RESPONSE_LENGTH),
        ("train/rollout/truncated_rate", _I.TRUNCATION_RATIO),
        ("train/kl", _I.KL),
        ("train/actor_grad_norm", _I.GRAD_NORM),
        ("train/policy_loss", _I.LOSS),
        ("eval/eval_*_pass1", _I.HELDOUT_REWARD),
    ),
    "nemo_rl": (
        ("train/approx_entropy", _I.ENTROPY),
        ("train/kl_penalty", _I.KL),
        ("train/grad_norm", _I.GRAD_NORM),
        ("train/loss", _I.LOSS),
        ("validation/accuracy", _I.HELDOUT_REWARD),
    ),
    "streamwatch": (
        ("token_prob", _I.TOKEN_PROB),
        ("*/mean_token_prob", _I.TOKEN_PROB),
        ("step_time", _I.STEP_TIME),
        ("throughput", _I.THROUGHPUT),
    ),
}


class IndicatorMap:
    """Resolve metric names to indicators; results are cached (the hot path is a dict hit)."""

    def __init__(
        self,
        presets: tuple[str, ...] = tuple(PRESETS),
        aliases: Mapping[str, str] | None = None,
    ) -> None:
        unknown = [p for p in presets if p not in PRESETS]
        if unknown:
            raise ValueError(f"unknown indicator preset(s) {unknown}; known: {sorted(PRESETS)}")
        rules: list[tuple[str, Indicator]] = []
        for pattern, name in (aliases or {}).items():
            try:
                rules.append((pattern, Indicator(name)))
            except ValueError as exc:
                known = ", ".join(i.value for i in Indicator)
                raise ValueError(
                    f"alias {pattern!r} -> {name!r}: no such indicator (known: {known})"
                ) from exc
        for preset in presets:
            rules.extend(PRESETS[preset])
        self._exact = {}
        self._globs = []
        for pattern, ind in rules:
            if any(c in pattern for c in "*?["):
                self._globs.append((pattern, ind))
            else:
                self._exact.setdefault(pattern, ind)
        self._cache: dict[str, Indicator | None] = {}

    _exact: dict[str, Indicator]
    _globs: list[tuple[str, Indicator]]

    def resolve(self, metric: str) -> Indicator | None:
        try:
            return self._cache[metric]
        except KeyError:
            pass
        found = self._exact.get(metric)
        if found is None:
            for pattern, ind in self._globs:
                if fnmatch.fnmatchcase(metric, pattern):
                    found = ind
                    break
        if len(self._cache) < 100_000:
            self._cache[metric] = found
        return found
