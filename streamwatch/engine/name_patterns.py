"""Names no preset knows, bound by the words in them: the last resort of the binding.

A framework without a preset, or a custom logger, still names its metrics in words
(mlx-lm's GRPO prints ``Total rewards std``, others log ``mean_reward`` or ``reward_std``).
A name is split into lower-case words (``Total rewards std`` -> total, rewards, std;
``meanReward`` -> mean, reward), and the first rule whose words it has gives its indicator.
These bindings rank after every alias and preset rule, so they only fill an indicator that
nothing else of the run feeds; among several names of one rule, the one with the fewest
words beside the rule's own wins (``Total rewards mean`` before
``r1_accuracy_reward_func mean``).

What no rule binds, on purpose: a setting rather than a measurement (``kl_coef``, a target,
a weight, a learning rate); anything of an evaluation (``val``, ``eval``, ``test``) but its
reward or accuracy, which is the held-out score; step times and throughput, whose names say
too little of what they time, and the time spent on a quantity, which is not the quantity
(Tinker's ``time/compute_kl_sample_train``: seconds, not a KL).

>>> match("Total rewards std")
Match(indicator='reward_std', what='reward + std', rule=1, extra=0)
>>> [match(n).indicator for n in ("mean_reward", "Val total_rewards_mean", "Grouped rewards")]
['train_reward', 'heldout_reward', 'train_reward']
>>> print(match("actor/kl_coef"), match("Val kl"), match("perf/time_per_step"))
None None None
>>> print(match("time/compute_kl_sample_train"), match("timing_s/reward"))
None None
>>> [match(n).what for n in ("eval/accuracy", "eval/ndcg@10")]
['evaluation + reward or accuracy', 'evaluation + a quality score (ndcg, recall, f1...)']
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["EVAL_RULES", "HELDOUT", "RULES", "Match", "PatternRule", "match", "words"]

_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_WORD = re.compile(r"[a-z]+|[0-9]+")

REWARD = frozenset({"reward", "rewards", "score", "scores"})
STD = frozenset({"std", "stdev", "stddev", "sd"})
MAX = frozenset({"max", "maximum"})
MIN = frozenset({"min", "minimum"})
EVAL = frozenset({"val", "validation", "eval", "evaluation", "test", "heldout"})
ACCURACY = frozenset({"accuracy", "acc", "pass", "correct", "success"})
#: an evaluation's quality scores other than a reward or an accuracy: ranking and retrieval
#: (NDCG, MRR, hit rate, recall, precision), and answers matched (F1, exact match)
QUALITY = frozenset(
    {"ndcg", "mrr", "hit", "hits", "hitrate", "recall", "precision", "f1", "em", "exact"}
)
#: words of a setting or a target, not of something the run measured
SETTING = frozenset({"coef", "coeff", "coefficient", "beta", "target", "weight", "lr", "ctl"})
#: words of the time spent on something: a duration, not the thing measured
TIMED = frozenset({"time", "timing", "seconds", "elapsed", "duration", "runtime"})
#: words that say nothing of what is measured: not counted against a name
NEUTRAL = frozenset({"mean", "avg", "average", "train", "training", "batch", "total", "all"})
LENGTH = frozenset({"length", "len", "lengths"})
GENERATED = frozenset({"response", "responses", "completion", "completions", "generated"})
NOT_RESPONSE = frozenset({"prompt", "prompts", "input", "seq", "seqlen", "sequence", "global"})
OTHER_LOSS = frozenset({"value", "vf", "critic", "sft", "aux", "kl", "entropy"})
#: words of a count: a number of things, never a share of them
COUNT = frozenset({"num", "n", "count", "counts", "number", "cnt"})


@dataclass(frozen=True)
class PatternRule:
    indicator: str  # an :class:`~streamwatch.engine.indicators.Indicator`'s value
    what: str  # the words it looks for, as ``inspect`` says them
    test: Callable[[frozenset[str]], bool]
    vocabulary: frozenset[str]  # its own words (not counted as extra)


def _both(a: frozenset[str], b: frozenset[str]) -> Callable[[frozenset[str]], bool]:
    return lambda w: bool(w & a) and bool(w & b)


def _length(w: frozenset[str]) -> bool:
    """A completion's length: its words, or a length averaged (``Avg length``)."""
    said = bool(w & LENGTH) and bool(w & (GENERATED | {"avg", "mean", "average"}))
    generated = "tokens" in w and "generated" in w
    return (said or generated) and not w & NOT_RESPONSE


def _truncated(w: frozenset[str]) -> bool:
    """Completions cut at the cap: truncated, clipped (TRL's ``clipped_ratio``), or a clip of
    a completion or its length (OpenRLHF's ``response_clip_ratio``)."""
    cut = bool(w & {"truncated", "truncation"}) or _both(frozenset({"clipped"}), SHARE)(w)
    return (cut or _both(CLIPPED, GENERATED | LENGTH)(w)) and not w & (NOT_RESPONSE | COUNT)


def _clip_fraction(w: frozenset[str]) -> bool:
    """The policy ratio clipped (PPO's clip fraction); a clipped length is another thing."""
    clipped = "clipfrac" in w or _both(CLIPPED, SHARE)(w)
    return clipped and not w & (NOT_RESPONSE | LENGTH | COUNT)


CLIPPED = frozenset({"clip", "clipped"})
SHARE = frozenset({"frac", "fraction", "ratio", "rate"})
_LEN = LENGTH | GENERATED | {"tokens"}

#: In order: the first rule a name's words satisfy binds it.
RULES: tuple[PatternRule, ...] = (
    PatternRule("zero_variance_groups", "zero + std", _both(frozenset({"zero"}), STD),
                frozenset({"zero", "frac", "fraction"}) | STD | REWARD),
    PatternRule("reward_std", "reward + std", _both(REWARD, STD), REWARD | STD),
    PatternRule("reward_max", "reward + max", _both(REWARD, MAX), REWARD | MAX),
    PatternRule("reward_min", "reward + min", _both(REWARD, MIN), REWARD | MIN),
    PatternRule("kl", "kl", lambda w: "kl" in w, frozenset({"kl", "loss", "divergence"})),
    PatternRule("entropy", "entropy", lambda w: "entropy" in w, frozenset({"entropy", "loss"})),
    PatternRule("grad_norm", "grad + norm",
                lambda w: "gradnorm" in w or _both(frozenset({"grad", "gradient"}),
                                                  frozenset({"norm"}))(w),
                frozenset({"grad", "gradient", "norm", "gradnorm"})),
    PatternRule("train_reward", "reward", lambda w: bool(w & REWARD), REWARD),
    PatternRule("truncation_ratio", "truncated, or clipped", _truncated,
                frozenset({"truncated", "truncation"}) | CLIPPED | SHARE | GENERATED | LENGTH),
    PatternRule("clip_fraction", "clip + fraction", _clip_fraction,
                CLIPPED | SHARE | {"clipfrac"}),
    PatternRule("response_length_max", "completion length + max",
                lambda w: _length(w) and bool(w & MAX), _LEN | MAX),
    PatternRule("response_length_min", "completion length + min",
                lambda w: _length(w) and bool(w & MIN), _LEN | MIN),
    PatternRule("response_length", "completion length", _length, _LEN),
    PatternRule("loss", "loss", lambda w: "loss" in w and not w & OTHER_LOSS,
                frozenset({"loss", "policy", "pg"})),
)  # fmt: skip
#: What an evaluation's name may give: its score, never a training indicator.
HELDOUT = PatternRule(
    "heldout_reward",
    "evaluation + reward or accuracy",
    lambda w: bool(w & (REWARD | ACCURACY)) and not w & (STD | MAX | MIN),
    EVAL | REWARD | ACCURACY,
)
#: ...or, when no reward or accuracy of an evaluation is logged, another quality score of it:
#: a recommender's validation ``ndcg@10`` (fewer other words first: ``recall@10`` before
#: ``cold_recall@10``)
HELDOUT_QUALITY = PatternRule(
    "heldout_reward",
    "evaluation + a quality score (ndcg, recall, f1...)",
    lambda w: bool(w & QUALITY) and not w & (STD | MAX | MIN),
    EVAL | QUALITY,
)
#: The rules of an evaluation's names, in order, ranked after :data:`RULES`.
EVAL_RULES = (HELDOUT, HELDOUT_QUALITY)


def words(name: str) -> frozenset[str]:
    """A metric name's words, lower case (``Total rewards/std`` -> total, rewards, std)."""
    return frozenset(_WORD.findall(_CAMEL.sub(r"\1 \2", name).lower()))


class Match(NamedTuple):
    indicator: str
    what: str  # the rule's words
    rule: int  # its place (the held-out rule after the others)
    extra: int  # how many other words the name has (fewer: a closer match)


def match(name: str) -> Match | None:
    """What the name's words give, or None when no rule takes it."""
    w = words(name)
    if not w or w & (SETTING | TIMED):
        return None
    if w & EVAL:
        candidates = tuple(enumerate(EVAL_RULES, start=len(RULES)))
    else:
        candidates = tuple(enumerate(RULES))
    for place, rule in candidates:
        if rule.test(w):
            return Match(rule.indicator, rule.what, place, len(w - rule.vocabulary - NEUTRAL))
    return None
