"""Canonical indicators and the metric names each framework logs them under.

A metric name resolves to at most one indicator. Presets cover verl, TRL (raw names and
with transformers' ``train/``/``eval/`` prefixes), OpenRLHF, NeMo RL, slime, prime-rl, SkyRL,
AReaL, ROLL, ms-swift and mlx-lm; user aliases (config ``indicators.aliases``) come first.
Rules are exact names or shell-style globs (``val-core/*/reward/mean@*``). A name that no
rule matches is bound by the words in it, last (:mod:`streamwatch.engine.name_patterns`:
``mean_reward`` is a train reward), unless ``patterns`` is off.

>>> print(IndicatorMap().resolve("actor/entropy"))
entropy
>>> print(IndicatorMap().resolve("val-core/openai/gsm8k/reward/mean@1"))
heldout_reward
>>> print(IndicatorMap(aliases={"my/ent": "entropy"}).resolve("my/ent"))
entropy
>>> IndicatorMap().resolve("perf/mfu/actor") is None
True
>>> print(IndicatorMap().resolve("mean_reward"), IndicatorMap(patterns=False).resolve("reward"))
train_reward train_reward
>>> IndicatorMap(patterns=False).resolve("mean_reward") is None
True
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Final

from mypy_extensions import mypyc_attr

import streamwatch.engine.name_patterns as name_patterns

__all__ = ["PRESETS", "Indicator", "IndicatorMap", "is_glob"]

_MAX_CACHED: Final = 100_000
#: ranks per pattern rule: a name with more words beside the rule's ranks later within it
_PER_RULE: Final = 100


class Indicator(StrEnum):
    RESPONSE_LENGTH = "response_length"
    #: the longest and the shortest completion of a step (their lengths)
    RESPONSE_LENGTH_MAX = "response_length_max"
    RESPONSE_LENGTH_MIN = "response_length_min"
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
    #: the fraction (or count) of prompt groups whose completions all got the same reward
    ZERO_VARIANCE_GROUPS = "zero_variance_groups"
    #: the fraction of tokens whose policy ratio was clipped
    CLIP_FRACTION = "clip_fraction"
    #: how far the rollout engine's token probabilities are from the trainer's
    PROB_MISMATCH = "prob_mismatch"
    #: the highest and the lowest reward of a step's completions
    REWARD_MAX = "reward_max"
    REWARD_MIN = "reward_min"


_I: Final = Indicator

_TRL: Final = (
    ("entropy", _I.ENTROPY),
    ("reward", _I.TRAIN_REWARD),
    ("rewards/*/mean", _I.TRAIN_REWARD),
    ("reward_std", _I.REWARD_STD),
    ("frac_reward_zero_std", _I.ZERO_VARIANCE_GROUPS),
    ("completions/mean_length", _I.RESPONSE_LENGTH),
    ("completions/max_length", _I.RESPONSE_LENGTH_MAX),
    ("completions/min_length", _I.RESPONSE_LENGTH_MIN),
    ("completions/clipped_ratio", _I.TRUNCATION_RATIO),
    ("kl", _I.KL),
    ("clip_ratio/region_mean", _I.CLIP_FRACTION),
    ("sampling/sampling_logp_difference/mean", _I.PROB_MISMATCH),
    ("grad_norm", _I.GRAD_NORM),
    ("loss", _I.LOSS),
    ("train_samples_per_second", _I.THROUGHPUT),
)
_TRL_EVAL: Final = (
    ("reward", _I.HELDOUT_REWARD),
    ("accuracy", _I.HELDOUT_REWARD),
    ("rewards/*/mean", _I.HELDOUT_REWARD),
    ("*accuracy*", _I.HELDOUT_REWARD),
)


def _prefixed(prefix: str, rules: tuple[tuple[str, Indicator], ...]) -> list[tuple[str, Indicator]]:
    return [(prefix + pattern, ind) for pattern, ind in rules]


#: framework -> ordered (pattern, indicator) pairs. Where several metrics of a run match one
#: indicator, an exact name beats a glob and an earlier rule beats a later one
#: (:class:`IndicatorMap`). Each list follows the names the framework's own code logs.
PRESETS: Final[dict[str, tuple[tuple[str, Indicator], ...]]] = {
    "verl": (
        ("actor/entropy", _I.ENTROPY),
        ("actor/entropy_loss", _I.ENTROPY),
        ("critic/score/mean", _I.TRAIN_REWARD),
        ("critic/rewards/mean", _I.TRAIN_REWARD),
        ("critic/score/max", _I.REWARD_MAX),
        ("critic/score/min", _I.REWARD_MIN),
        ("response_length/mean", _I.RESPONSE_LENGTH),
        ("response_length/max", _I.RESPONSE_LENGTH_MAX),
        ("response_length/min", _I.RESPONSE_LENGTH_MIN),
        ("response_length/clip_ratio", _I.TRUNCATION_RATIO),
        ("actor/kl_loss", _I.KL),
        ("actor/ppo_kl", _I.KL),
        ("actor/pg_clipfrac", _I.CLIP_FRACTION),
        ("training/rollout_probs_diff_mean", _I.PROB_MISMATCH),
        ("rollout_corr/kl", _I.PROB_MISMATCH),
        ("actor/grad_norm", _I.GRAD_NORM),
        ("actor/pg_loss", _I.LOSS),
        ("val-core/*/reward/mean@*", _I.HELDOUT_REWARD),
        # the mean accuracy over the samples before their best/worst/majority of N
        # (``val-core/x/acc/mean@32`` before ``val-core/x/acc/best@32/mean``)
        ("val-core/*/acc/mean@*", _I.HELDOUT_REWARD),
        ("val-core/*/mean@*", _I.HELDOUT_REWARD),
        ("val-core/*", _I.HELDOUT_REWARD),
        ("val/test_score/*", _I.HELDOUT_REWARD),
        ("timing_s/step", _I.STEP_TIME),
        ("perf/throughput", _I.THROUGHPUT),
    ),
    # raw names (trainer_state.json, the console), then as transformers renames them for
    # W&B and TensorBoard (``train/...``, ``eval/...``)
    "trl": (
        *_TRL,
        *_prefixed("eval_", _TRL_EVAL),
        *_prefixed("train/", _TRL),
        *_prefixed("eval/", _TRL_EVAL),
    ),
    "openrlhf": (
        ("train/entropy_loss", _I.ENTROPY),
        ("train/rollout/reward_mean", _I.TRAIN_REWARD),
        ("train/reward", _I.TRAIN_REWARD),
        ("train/rollout/reward_std", _I.REWARD_STD),
        ("train/rollout/response_length_mean", _I.RESPONSE_LENGTH),
        ("train/response_length", _I.RESPONSE_LENGTH),
        ("train/rollout/truncated_rate", _I.TRUNCATION_RATIO),
        ("train/response_clip_ratio", _I.TRUNCATION_RATIO),
        ("train/kl", _I.KL),
        ("train/ppo_kl", _I.KL),
        ("train/ppo_clip_ratio", _I.CLIP_FRACTION),
        ("train/vllm_kl", _I.PROB_MISMATCH),
        ("train/actor_grad_norm", _I.GRAD_NORM),
        ("train/policy_loss", _I.LOSS),
        ("train/timing/step_total", _I.STEP_TIME),
        ("eval/eval_*_pass1", _I.HELDOUT_REWARD),
    ),
    "nemo_rl": (
        ("train/approx_entropy", _I.ENTROPY),
        ("train/reward", _I.TRAIN_REWARD),
        ("train/mean_gen_tokens_per_sample", _I.RESPONSE_LENGTH),
        ("train/truncation_rate", _I.TRUNCATION_RATIO),
        ("train/kl_penalty", _I.KL),
        ("train/probs_ratio_clamped", _I.CLIP_FRACTION),
        ("train/token_mult_prob_error", _I.PROB_MISMATCH),
        ("train/gen_kl_error", _I.PROB_MISMATCH),
        ("train/grad_norm", _I.GRAD_NORM),
        ("train/loss", _I.LOSS),
        ("validation/accuracy", _I.HELDOUT_REWARD),
    ),
    "slime": (
        ("rollout/entropy", _I.ENTROPY),
        ("train/entropy_loss", _I.ENTROPY),
        ("rollout/raw_reward", _I.TRAIN_REWARD),
        ("rollout/rewards", _I.TRAIN_REWARD),
        ("rollout/response_len/mean", _I.RESPONSE_LENGTH),
        ("rollout/response_lengths", _I.RESPONSE_LENGTH),
        ("rollout/truncated_ratio", _I.TRUNCATION_RATIO),
        ("rollout/zero_std/*", _I.ZERO_VARIANCE_GROUPS),
        ("train/kl_loss", _I.KL),
        ("train/ppo_kl", _I.KL),
        ("train/pg_clipfrac", _I.CLIP_FRACTION),
        ("train/train_rollout_logprob_abs_diff", _I.PROB_MISMATCH),
        ("train/grad_norm", _I.GRAD_NORM),
        ("train/pg_loss", _I.LOSS),
        ("perf/step_time", _I.STEP_TIME),
    ),
    "prime_rl": (
        ("entropy/all/mean", _I.ENTROPY),
        ("train/agg/effective/reward/mean", _I.TRAIN_REWARD),
        ("train/agg/effective/*/reward/mean", _I.TRAIN_REWARD),
        ("train/agg/effective/num_output_tokens/mean", _I.RESPONSE_LENGTH),
        ("train/agg/effective/*/is_truncated/mean", _I.TRUNCATION_RATIO),
        ("mismatch_kl/all/mean", _I.PROB_MISMATCH),
        ("optim/grad_norm", _I.GRAD_NORM),
        ("loss/mean", _I.LOSS),
        ("eval/*/effective/*/avg@*", _I.HELDOUT_REWARD),
        ("time/step", _I.STEP_TIME),
    ),
    "skyrl": (
        ("policy/policy_entropy", _I.ENTROPY),
        ("reward/avg_raw_reward", _I.TRAIN_REWARD),
        ("reward/mean", _I.TRAIN_REWARD),
        ("generate/avg_num_tokens", _I.RESPONSE_LENGTH),
        ("reward/num_zero_variance_filtered", _I.ZERO_VARIANCE_GROUPS),
        ("policy/policy_kl", _I.KL),
        ("loss/avg_kl", _I.KL),
        ("policy/loss_metrics/clip_ratio", _I.CLIP_FRACTION),
        ("policy/rollout_train_logprobs_abs_diff_mean", _I.PROB_MISMATCH),
        ("policy/grad_norm", _I.GRAD_NORM),
        ("policy/policy_loss", _I.LOSS),
        ("eval/all/avg_score", _I.HELDOUT_REWARD),
    ),
    "areal": (
        ("*update/entropy/avg", _I.ENTROPY),
        ("*/task_reward/avg", _I.TRAIN_REWARD),
        ("*/seq_len/avg", _I.RESPONSE_LENGTH),
        ("*/no_eos_ratios/avg", _I.TRUNCATION_RATIO),
        ("*update/approx_kl/avg", _I.KL),
        ("*update/clip_ratio/avg", _I.CLIP_FRACTION),
        ("*update/behave_approx_kl/avg", _I.PROB_MISMATCH),
        ("*update/grad_norm", _I.GRAD_NORM),
        ("*update/actor_loss/avg", _I.LOSS),
    ),
    "roll": (
        ("critic/entropy/mean", _I.ENTROPY),
        ("critic/score/mean", _I.TRAIN_REWARD),
        ("critic/rewards/mean", _I.TRAIN_REWARD),
        ("tokens/response_length/mean", _I.RESPONSE_LENGTH),
        ("actor/max_len_mask_ratio", _I.TRUNCATION_RATIO),
        ("actor/kl_loss", _I.KL),
        ("actor/ppo_ratio_clipfrac", _I.CLIP_FRACTION),
        ("actor_train/grad_norm", _I.GRAD_NORM),
        ("actor/pg_loss", _I.LOSS),
        ("val/*/score/mean", _I.HELDOUT_REWARD),
        ("time/step_total", _I.STEP_TIME),
    ),
    # ms-swift's GRPO logs TRL's names, and a few of its own
    "ms_swift": (
        ("entropy/mean", _I.ENTROPY),
        ("rollout_correction/*kl*", _I.PROB_MISMATCH),
    ),
    # mlx-lm's GRPO trainer (mlx-lm-lora, and the GRPO of ml-explore/mlx-examples#1233): the
    # names it prints on the console (``Iter 5: Train loss 0.1, Total rewards mean ...``),
    # then the keys it hands its training callback (W&B); both stds are of every completion's
    # reward, the grouped one first
    "mlx_lm": (
        ("Total rewards mean", _I.TRAIN_REWARD),
        ("Grouped rewards std", _I.REWARD_STD),
        ("Total rewards std", _I.REWARD_STD),
        ("KL", _I.KL),
        ("Train loss", _I.LOSS),
        ("Clip fraction", _I.CLIP_FRACTION),
        ("Avg length", _I.RESPONSE_LENGTH),
        ("Average Generated Tokens", _I.RESPONSE_LENGTH),
        ("Val total_rewards_mean", _I.HELDOUT_REWARD),
        ("train_total_rewards_mean", _I.TRAIN_REWARD),
        ("train_grouped_rewards_std", _I.REWARD_STD),
        ("train_total_rewards_std", _I.REWARD_STD),
        ("train_kl", _I.KL),
        ("train_loss", _I.LOSS),
        ("val_total_rewards_mean", _I.HELDOUT_REWARD),
    ),
    "streamwatch": (
        ("token_prob", _I.TOKEN_PROB),
        ("*/mean_token_prob", _I.TOKEN_PROB),
        ("step_time", _I.STEP_TIME),
        ("throughput", _I.THROUGHPUT),
    ),
}


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class IndicatorMap:
    """Resolve metric names to indicators, each with its rank; results are cached (the hot
    path is a dict hit).

    A metric's rank says how strongly it claims its indicator: user aliases before presets;
    within each, every exact name before any glob; then the order of the rules (presets in
    the configured order); after them all, a name bound by its words (by pattern rule, then
    by how few other words it has). When several metrics of one run resolve to the same
    indicator, the lowest rank feeds it, whichever metric arrives first.

    >>> m = IndicatorMap()
    >>> print(m.resolve("eval_reward"), m.resolve("eval_rewards/accuracy/mean"))
    heldout_reward heldout_reward
    >>> m.rank("eval_reward") < m.rank("eval_rewards/accuracy/mean")
    True
    """

    def __init__(
        self,
        presets: tuple[str, ...] = tuple(PRESETS),
        aliases: Mapping[str, str] | None = None,
        patterns: bool = True,
    ) -> None:
        unknown = [p for p in presets if p not in PRESETS]
        if unknown:
            raise ValueError(f"unknown indicator preset(s) {unknown}; known: {sorted(PRESETS)}")
        user: list[tuple[str, Indicator]] = []
        for pattern, name in (aliases or {}).items():
            try:
                user.append((pattern, Indicator(name)))
            except ValueError as exc:
                known = ", ".join(i.value for i in Indicator)
                raise ValueError(
                    f"alias {pattern!r} -> {name!r}: no such indicator (known: {known})"
                ) from exc
        preset_rules = [rule for preset in presets for rule in PRESETS[preset]]
        self._exact: dict[str, tuple[Indicator, int]] = {}
        self._globs: list[tuple[str, Indicator, int]] = []
        rank = 0
        for rules in (user, preset_rules):
            for exact in (True, False):
                for pattern, ind in rules:
                    if is_glob(pattern) == exact:
                        continue
                    if exact:
                        self._exact.setdefault(pattern, (ind, rank))
                    else:
                        self._globs.append((pattern, ind, rank))
                    rank += 1
        #: the first rank of a name bound by its words
        self.patterned = rank
        self.patterns = patterns
        #: the rank of a metric that matches no rule
        word_rules = len(name_patterns.RULES) + len(name_patterns.EVAL_RULES)
        self.unranked = rank + word_rules * _PER_RULE
        self._cache: dict[str, tuple[Indicator | None, int]] = {}

    def lookup(self, metric: str) -> tuple[Indicator | None, int]:
        """The metric's indicator (None: no rule matches) and its rank (lower claims first)."""
        try:
            return self._cache[metric]
        except KeyError:
            pass
        found: tuple[Indicator | None, int] | None = self._exact.get(metric)
        if found is None:
            found = next(
                ((ind, rank) for pattern, ind, rank in self._globs if fnmatchcase(metric, pattern)),
                None,
            )
        if found is None:
            found = self._by_words(metric)
        if len(self._cache) < _MAX_CACHED:
            self._cache[metric] = found
        return found

    def _by_words(self, metric: str) -> tuple[Indicator | None, int]:
        matched = name_patterns.match(metric) if self.patterns else None
        if matched is None:
            return None, self.unranked
        rank = self.patterned + matched.rule * _PER_RULE + min(matched.extra, _PER_RULE - 1)
        return Indicator(matched.indicator), rank

    def pattern(self, metric: str) -> str | None:
        """The words by which the metric was bound (``reward + std``), or None when a rule
        (or nothing) binds it."""
        rank = self.lookup(metric)[1]
        if not self.patterned <= rank < self.unranked:
            return None
        matched = name_patterns.match(metric)
        return matched.what if matched else None

    def resolve(self, metric: str) -> Indicator | None:
        """The metric's indicator, or None when no rule matches it."""
        return self.lookup(metric)[0]

    def rank(self, metric: str) -> int:
        """The metric's rank (:attr:`unranked` when no rule matches it)."""
        return self.lookup(metric)[1]


def is_glob(pattern: str) -> bool:
    """Whether a rule is a shell-style glob rather than an exact metric name."""
    return any(c in pattern for c in "*?[")
