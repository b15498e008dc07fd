"""Which direction is better, per indicator, when two runs differ significantly.

- train reward, held-out reward, throughput: higher is better.
- truncation (clip) ratio, step time: lower is better.
- entropy: a band. Much lower (x0.5 or less: collapse, no exploration) or much higher
  (x2 or more: blow-up, gibberish) is worse; a smaller significant change is "different",
  because a moderately lower or higher entropy is not in itself good or bad.
- response length: neutral unless it runs away: x2 or more (explosion) or x0.5 or less
  (collapse) is worse, anything else significant is "different".
- token probability, reward spread, KL, grad norm, loss and any metric named by hand:
  neutral ("different" when significant).

Verdicts: ``better`` / ``worse`` (significant, in a direction that matters), ``different``
(significant, neutral direction), ``indistinguishable`` (not significant).

>>> judge(POLICIES["entropy"], True, math.log(0.1), 0.2, 0.02)
(<Verdict.WORSE: 'worse'>, 'collapse (x0.1 of baseline)')
>>> judge(POLICIES["train_reward"], False, 0.05, 0.80, 0.85)[0].value
'better'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from streamwatch.engine.indicators import Indicator

__all__ = ["NEUTRAL", "POLICIES", "Policy", "Verdict", "judge"]


class Verdict(StrEnum):
    BETTER = "better"
    WORSE = "worse"
    DIFFERENT = "different"
    INDISTINGUISHABLE = "indistinguishable"


@dataclass(frozen=True)
class Policy:
    """Which way is better for an indicator (``higher``, ``lower``, ``neutral``, ``band``).

    ``band``: a candidate/baseline ratio at or below ``low`` or at or above ``high`` is
    worse (named ``low_name`` / ``high_name``), anything between is neutral. ``log``:
    compare logarithms (ratios), for positive quantities with multiplicative spread.
    """

    goal: str
    log: bool = False
    low: float = 0.5
    high: float = 2.0
    low_name: str = "collapse"
    high_name: str = "blow-up"


_I = Indicator
POLICIES: dict[str, Policy] = {
    _I.TRAIN_REWARD: Policy("higher"),
    _I.HELDOUT_REWARD: Policy("higher"),
    _I.ENTROPY: Policy("band", log=True, low_name="collapse", high_name="blow-up"),
    _I.TOKEN_PROB: Policy("neutral"),
    _I.RESPONSE_LENGTH: Policy("band", log=True, low_name="collapse", high_name="explosion"),
    _I.TRUNCATION_RATIO: Policy("lower"),
    _I.REWARD_STD: Policy("neutral"),
    _I.KL: Policy("neutral", log=True),
    _I.GRAD_NORM: Policy("neutral", log=True),
    _I.LOSS: Policy("neutral"),
    _I.STEP_TIME: Policy("lower", log=True),
    _I.THROUGHPUT: Policy("higher", log=True),
}
NEUTRAL = Policy("neutral")


def judge(
    policy: Policy, log: bool, effect: float, baseline: float, candidate: float
) -> tuple[Verdict, str]:
    """The verdict on a significant difference: ``effect`` is candidate - baseline (a log
    ratio when ``log``), ``baseline`` and ``candidate`` the two levels; with a note."""
    if policy.goal == "higher":
        return (Verdict.BETTER if effect > 0 else Verdict.WORSE), ""
    if policy.goal == "lower":
        return (Verdict.BETTER if effect < 0 else Verdict.WORSE), ""
    if policy.goal == "band":
        ratio = math.exp(effect) if log else (candidate / baseline if baseline > 0 else math.nan)
        if ratio <= policy.low:
            return Verdict.WORSE, f"{policy.low_name} (x{ratio:.2g} of baseline)"
        if ratio >= policy.high:
            return Verdict.WORSE, f"{policy.high_name} (x{ratio:.2g} of baseline)"
    return Verdict.DIFFERENT, ""
