"""Severity from the whole run: each finding graded in its run's context.

A check says what it saw in its own series and by which rule (``Finding.rule``); this module
decides what that asks of a person, from the run's :class:`~streamwatch.checks.context.RunContext`
(is it still learning, which way the series moves, does a second signal agree), and writes
why into the finding's evidence (``because``: what raised it, what agreed or spoke against,
and the decision). It may also hold a finding back: one step of a high clip ratio proves
nothing before its direction is known. The severity reference (``docs/severity.md``) is this
module's rules in words; the two are kept together.

The findings of a step are judged when the step's event is complete, so a second signal of
the same step counts whatever the order of the event's metrics.
"""

from __future__ import annotations

import fnmatch
import math
from typing import Final

from mypy_extensions import mypyc_attr

from streamwatch.checks.context import Direction, RunContext
from streamwatch.config import EngineConfig
from streamwatch.engine.findings import Finding
from streamwatch.incidents import SEVERITY_RANK, Kind, Severity

__all__ = ["Because", "judge"]

# the enums' members, looked up once: compiled, ``Kind.X`` is a look-up on the class, which
# goes through the enum type's ``__getattr__`` (interpreted) at every finding
_INFO: Final = Severity.INFO
_WARNING: Final = Severity.WARNING
_CRITICAL: Final = Severity.CRITICAL
_TRUNCATION: Final = Kind.TRUNCATION_SATURATION
_EXPLOSION: Final = Kind.LENGTH_EXPLOSION
_SHORTENING: Final = Kind.LENGTH_COLLAPSE
_ENTROPY_COLLAPSE: Final = Kind.ENTROPY_COLLAPSE
_ENTROPY_BLOWUP: Final = Kind.ENTROPY_BLOWUP
_SPIKE: Final = Kind.METRIC_SPIKE
_SIGNAL: Final = Kind.NO_LEARNING_SIGNAL
_CHAOS: Final = Kind.REWARD_CHAOS
_DRIFT: Final = Kind.METRIC_DRIFT
#: logged values in a row beyond a ceiling that make it critical: it stays there (a KL
#: estimate from few tokens can jump past its ceiling for a log or two and come back)
_CEILING_PERSIST: Final = 3


def judge(
    f: Finding, ctx: RunContext, cfg: EngineConfig, held: Severity | None = None
) -> Finding | None:
    """``f`` with the severity the run's context gives it and its ``because``; None when it
    is held back.

    ``held``: the severity of the run's incident of ``f``'s kind and indicator when one is
    firing. A finding that does not raise it is no news (the incident book announces
    nothing): it is graded alike, but its ``because`` is not written.
    """
    kind = f.kind
    because = Because(ctx, f.metric, f.rule)
    if kind is _TRUNCATION:
        graded = _truncation(f, ctx, cfg, because)
    elif kind is _EXPLOSION:
        graded = _length(f, ctx, cfg, because)
    elif kind is _SHORTENING:
        graded = _shortening(f, ctx, because)
    elif kind is _ENTROPY_COLLAPSE or kind is _ENTROPY_BLOWUP:
        graded = _entropy(f, ctx, cfg, because)
    elif kind is _SPIKE:
        graded = _spike(f, ctx, because)
    elif kind is _SIGNAL:
        graded = _signal(f, ctx, because)
    elif kind is _CHAOS:
        graded = _chaos(f, ctx, cfg, because)
    elif kind is _DRIFT:
        graded = _drift(f, ctx, cfg, because)
    else:
        graded = _decide(f.severity, "the check's own rule", because)
    if graded is None:
        return None
    evidence = f.evidence  # the check's, which made it for this finding alone
    if held is None or SEVERITY_RANK[graded] > SEVERITY_RANK[held]:
        evidence = dict(evidence)
        evidence["because"] = because.words()
    # built directly: dataclasses.replace reads the class's fields anew at every finding
    return Finding(
        f.kind, f.indicator, f.metric, graded, f.step, f.words, evidence, f.onset_step, f.rule
    )


@mypyc_attr(serializable=True, allow_interpreted_subclasses=True)
class Because:
    """Why a finding has its severity, in words, as the judgement goes: what raised it, what
    agreed or spoke against, the decision. A series' direction (:meth:`trend`) is put in
    words only when they are asked for (:meth:`words`): its five figures are most of what a
    judgement costs, and a finding that repeats a firing incident is read by nobody.

    >>> from streamwatch.config import ContextSettings
    >>> ctx = RunContext(ContextSettings())
    >>> because = Because(ctx, "actor/entropy")
    >>> because.trend("train_reward", ctx.reward)
    >>> because.words()
    ['raised by actor/entropy', 'train_reward: too few values to tell its direction']
    """

    __slots__ = ("ctx", "items", "metric", "rule")

    def __init__(self, ctx: RunContext, metric: str, rule: str = "") -> None:
        self.ctx = ctx
        self.metric = metric  # what raised the finding, by which rule (words: ``words``)
        self.rule = rule
        self.items: list[str | tuple[str, Direction, str]] = []

    def append(self, words: str) -> None:
        self.items.append(words)

    def extend(self, words: list[str]) -> None:
        self.items.extend(words)

    def trend(self, name: str, d: Direction, unit: str = "a step") -> None:
        """``name`` and which way it moves (the context's :meth:`RunContext.trend_words`)."""
        self.items.append((name, d, unit))

    def words(self) -> list[str]:
        ctx = self.ctx
        first = f"raised by {self.metric}" + (f" ({self.rule} rule)" if self.rule else "")
        return [first] + [w if isinstance(w, str) else ctx.trend_words(*w) for w in self.items]


def _decide(severity: Severity, why: str, because: Because) -> Severity:
    because.append(f"{severity}: {why}")  # a str enum: its value (no property call)
    return severity


def _learning(ctx: RunContext, because: Because) -> bool:
    because.trend("train_reward", ctx.reward)
    if ctx.heldout.known:
        because.trend("heldout_reward", ctx.heldout, "an evaluation")
    return ctx.learning()


def _truncation(
    f: Finding, ctx: RunContext, cfg: EngineConfig, because: Because
) -> Severity | None:
    s = cfg.length
    second = ctx.second_signals(f.step)
    because.extend([f"agreed: {w}" for w in second])
    if f.rule == "cap":
        logged = ctx.truncation.last
        if logged == logged and logged <= 0.5:
            # the run's own clip ratio says most completions ended before the cap: one
            # length for all is the task's fixed form (an action, a label), not a cut
            because.append(f"truncation_ratio logged {logged:.3g} at the last step")
            return _decide(_INFO, "the logged clip ratio says few were cut", because)
        steps = int(f.evidence.get("steps", 1))
        if second or steps >= 2:
            why = "a second signal agrees" if second else f"for {steps} steps in a row"
            return _decide(_CRITICAL, why, because)
        return _decide(_WARNING, "one step so far, no second signal", because)
    smooth = float(f.evidence["smoothed"])
    course = ctx.truncation_course
    z = ctx.s.course_t
    low, slope, high = course.bounds(z)
    # which way it moves now: its last truncation_window values
    now_low, now_slope, now_high = course.bounds(z, ctx.s.truncation_window)
    if f.rule == "trend":  # a climb above its own trend, below the level rules
        because.trend("truncation_ratio", ctx.truncation)
        learning = _learning(ctx, because)
        rising = ctx.length.way(ctx.t) > 0
        because.trend("response_length", ctx.length)
        if rising and not learning:
            return _decide(_WARNING, "the length climbs with it, the reward does not", because)
        return _decide(_INFO, "a low clip ratio climbing, no second signal", because)
    because.append(_course_words(course.median(), len(course), low, slope, high))
    if len(course) > ctx.s.truncation_window:
        n = ctx.s.truncation_window
        because.append(_course_words(math.nan, n, now_low, now_slope, now_high))
    learning = _learning(ctx, because)
    near_one = smooth >= s.truncation_absolute_critical
    if second and _pinned(ctx, smooth, s.truncation_absolute_critical):
        # nearly every completion cut and the batch taught nothing: broken whatever comes
        # next. Below that, a high ratio with a second signal is how a weak model's first
        # batches look (long, scored alike); it needs the course's evidence like any other.
        return _decide(_CRITICAL, "near 1, and the batch taught nothing", because)
    steps = int(f.evidence.get("steps_high", 0))
    if len(course) < ctx.s.min_points:
        return None  # a few steps of a high ratio prove nothing before its direction is known
    if now_low > 0.0:  # shown to climb into the cap: the opposite of being fixed
        if near_one and steps >= ctx.s.min_points:
            return _decide(_CRITICAL, f"near 1 and rising for {steps} steps", because)
        return _decide(_WARNING, "high and rising", because)
    if steps < ctx.s.min_points:
        return None
    if high < 0.0 or now_high < 0.0:  # shown to fall
        if ctx.reward.way(ctx.t) >= 0:
            why = "high but falling: the policy learns to finish before the cap"
            return _decide(_INFO, why + ("" if learning else " (the reward not falling)"), because)
        return _decide(_WARNING, "falling, but so is the reward", because)
    if near_one:
        return _decide(_CRITICAL, f"near 1 and not falling for {steps} steps", because)
    # the slowest fall that is the policy learning to finish: halving within fix_steps
    fix = ctx.s.fix_steps
    steady = low > -smooth / (2.0 * fix)
    if steady and smooth >= s.truncation_critical and steps >= ctx.s.critical_steps:
        return _decide(_CRITICAL, f"high and not falling for {steps} steps", because)
    if steady:
        why = f"high and not falling (not even fast enough to halve in {fix} steps)"
        return _decide(_WARNING, why, because)
    # not shown to fall, nor shown too slow to fall: no evidence yet either way (a noisy
    # ratio's course narrows its interval step by step until one of the two shows)
    return None


def _pinned(ctx: RunContext, smooth: float, near_one: float) -> bool:
    """Is the clip ratio pinned near 1: smoothed there, or its last two logged values both
    there (a sparse log's few values smooth slowly; one value there can be a noisy batch)?"""
    if smooth >= near_one:
        return True
    last = ctx.truncation_course.last(2)
    return len(last) == 2 and min(last) >= near_one


def _course_words(median: float, n: int, low: float, slope: float, high: float) -> str:
    """The clip ratio's robust direction, in words."""
    what = "rising" if low > 0.0 else ("falling" if high < 0.0 else "not decided")
    level = "" if median != median else f"median {median:.3g}; "
    return (
        f"truncation_ratio {what} ({level}Theil-Sen {slope:+.3g} a step, "
        f"interval {low:+.3g}..{high:+.3g}, over its last {n} values)"
    )


def _length(f: Finding, ctx: RunContext, cfg: EngineConfig, because: Because) -> Severity:
    trunc = ctx.truncation
    because.trend("truncation_ratio", trunc)
    reward = ctx.reward.way(ctx.t)
    because.trend("train_reward", ctx.reward)
    t_way = trunc.way(ctx.t)
    # under 10% the clip ratio is a few completions of a batch (TRL's log of 5 steps of 8:
    # 0.025 a completion); its rise there is no length running into the cap yet
    low = trunc.known and trunc.mean() < ctx.s.low_truncation
    slow = f.rule in ("trend", "slow")  # growth over many steps, not 1.5x in 10
    if slow and low and reward >= 0:
        why = "truncation low, reward not falling: the expected lengthening"
        return _decide(_INFO, why + (" (truncation rising)" if t_way > 0 else ""), because)
    if slow and not trunc.known and reward > 0:
        return _decide(_INFO, "the reward rises with the length (no clip ratio logged)", because)
    if not trunc.known and ctx.still_learning():
        # a fast growth that the held-out reward (or the train reward, the held-out not
        # falling) pays for, with no clip ratio to say it runs into the cap
        because.trend("heldout_reward", ctx.heldout, "an evaluation")
        return _decide(_INFO, "the run learns as it grows (no clip ratio logged)", because)
    at_cap = trunc.known and trunc.mean() >= cfg.length.truncation_warning
    if f.severity is _CRITICAL and (at_cap or reward < 0):
        why = "running into the cap" if at_cap else "the reward falls as it grows"
        return _decide(_CRITICAL, why, because)
    if at_cap or t_way > 0:
        return _decide(_WARNING, "running into the cap", because)
    return _decide(_WARNING, "the reward does not pay for it", because)


def _shortening(f: Finding, ctx: RunContext, because: Because) -> Severity:
    """Answers that shorten while fewer of them are cut at the cap, the reward not falling,
    are the policy learning to finish (the falling truncation of the table's first row seen
    from the length); a collapse is a shortening the reward pays for with a fall."""
    trunc = ctx.truncation
    because.trend("truncation_ratio", trunc)
    because.trend("train_reward", ctx.reward)
    if trunc.way(ctx.t) < 0 and ctx.reward.way(ctx.t) >= 0:
        why = "fewer completions cut at the cap, the reward not falling: learning to finish"
        return _decide(_INFO, why, because)
    return _decide(f.severity, "the check's own rule", because)


def _entropy(f: Finding, ctx: RunContext, cfg: EngineConfig, because: Because) -> Severity | None:
    learning = _learning(ctx, because)
    if f.rule in ("trend", "rate"):
        # a change of pace, not of level: while the run learns it is the course of RLVR
        # (entropy falls 3-8x in healthy runs, fastest in their first steps), and above
        # 0.3x its start the policy keeps most of its exploration: nothing to tell; the
        # level rules say when it matters
        if learning:
            return None
        ratio = float(f.evidence.get("ratio_to_reference", 0.0))
        if f.kind is _ENTROPY_COLLAPSE and ratio >= cfg.entropy.fall_min_ratio:
            return None
        return _decide(_WARNING, "the run is not learning", because)
    if f.kind is _ENTROPY_COLLAPSE:
        # entropy falling while the run learns is RLVR's sharpening: the policy commits to
        # the answers that score; a collapse is one that ends the learning
        if ctx.still_learning():
            return _decide(_INFO, "low, but the run is still learning (sharpening)", because)
        floor = f.severity is _CRITICAL  # below the check's critical ratio: near its floor
        if not floor and ctx.heldout_at_best():
            why = "low, with the held-out reward holding at the run's best: converged"
            return _decide(_INFO, why, because)
        if ctx.stalled():
            if floor:
                return _decide(_CRITICAL, "near its floor, and learning has stalled", because)
            return _decide(_WARNING, "low, and learning has stalled", because)
        return _decide(f.severity, "no reward to judge the run by", because)
    if learning and f.severity is _CRITICAL:
        return _decide(_WARNING, "high, but the run is still learning", because)
    return _decide(f.severity, "its level", because)


def _signal(f: Finding, ctx: RunContext, because: Because) -> Severity | None:
    because.extend([f"agreed: {s}" for s in ctx.second_signals(f.step)])
    alike = float(f.evidence.get("zero_variance", math.nan))
    if f.evidence.get("grad_norm") == 0.0 and alike < 1.0 and ctx.loss_zero_step != f.step:
        # some groups' rewards differ and the loss is not 0, so GRPO's advantages are not all
        # 0 and neither is the gradient: a norm logged as exactly 0 beside them is the
        # logger's precision (a loss of 0 beside it is a broken update: not this case)
        because.append(f"{1.0 - alike:.0%} of the groups' rewards differ")
        return _decide(_INFO, "a gradient of 0 beside groups that differ: its precision", because)
    own = f.severity is _CRITICAL or f.rule == "at_once" or ctx.zero_grad_step == f.step
    # a slow drain beside a rising reward is the run solving its prompts; a few steps
    # alike in a row beside a reward that moves from step to step are a small batch's
    # chance (one prompt a step: Unsloth's notebooks): the steps between teach
    learning = _learning(ctx, because)
    values = ctx.reward.values.lane()
    moving = bool(values) and max(values) - min(values) > 1e-9
    if not own and f.rule == "persist" and (learning or moving):
        return None  # the steps between teach; critical if it lasts
    if ctx.solved(f.step) or (f.rule in ("drain", "persist") and ctx.held_at_best()):
        # every group alike because its completions all pass, or most of them (a share
        # alike, drained or held, beside a reward holding at its best): the run has
        # converged on its training prompts; done, not broken (all alike at the floor is)
        if ctx.solved_told:
            return None  # said once: it is the run's state, not news at every step
        ctx.solved_told = True
        because.append(
            f"train_reward {ctx.reward.last:.4g} (its last {len(ctx.reward.values)} values' "
            f"mean {ctx.reward.mean():.4g}) high in the run's range "
            f"{ctx.reward_low:.4g}..{ctx.reward_high:.4g}, at a best reached before"
        )
        why = "its prompts are solved: give harder prompts (or filter solved ones), or stop"
        return _decide(_INFO, why, because)
    if own:
        if ctx.zero_grad_step != f.step and ctx.heldout.way(ctx.t) > 0:
            # most groups teach nothing, but the held-out score still rises: the rest of
            # the batch teaches (the remedy, harder prompts, is said with it)
            return _decide(_INFO, "the held-out reward still rises", because)
        # a gradient of exactly 0 is no chance of a small batch: nothing is learnt
        return _decide(f.severity, "the check's own rule", because)
    if learning:
        return _decide(_INFO, "the run is still learning", because)
    return _decide(f.severity, "the run is not learning", because)


def _chaos(f: Finding, ctx: RunContext, cfg: EngineConfig, because: Because) -> Severity | None:
    ev = f.evidence
    recent, ref = float(ev["recent_noise_sd"]), float(ev["reference_noise_sd"])
    at = float(ev.get("recent_level", math.nan))
    ref_at = float(ev.get("reference_level", math.nan))
    binary = ctx.binary_reward()
    if (binary or ctx.small_batch()) and at == at and ref_at == ref_at:
        # a batch of few prompts, whose mean reaches the reward's bounds (the run's range),
        # or a pass/fail reward (its logged std says so): a bounded reward of mean m in
        # [lo, hi] has an sd of at most sqrt((m - lo)(hi - m)) (Bhatia-Davis), and a
        # pass/fail one's batch mean has sd sqrt(p(1 - p) / B) at any batch size B: as the
        # level moves off the floor, the noise grows by that factor with no change in the
        # batch. Judge the noise in those units.
        lo, hi = (0.0, 1.0) if binary else (ctx.reward_low, ctx.reward_high)

        def bound(m: float) -> float:
            return math.sqrt(max((m - lo) * (hi - m), 1e-24))

        # a pass/fail reward's reference in those units window by window, each at its level
        per_bound = float(ev.get("reference_noise_per_bound", math.nan))
        ref_units = per_bound if binary and per_bound == per_bound else ref / bound(ref_at)
        # the window's bulk: a value or two of a heavy tail is no noise grown
        robust = float(ev.get("recent_noise_robust", recent))
        growth = (min(recent, robust) / bound(at)) / max(ref_units, 1e-12)
        what = (
            "a pass/fail reward (its std sqrt(m (1 - m)) at its mean m)"
            if binary
            else "a batch of few prompts (every completion alike at steps between varying ones)"
        )
        because.append(
            f"{what}: its noise at level "
            f"{at:.3g} is {growth:.2f}x its reference at level {ref_at:.3g} in units of the "
            f"largest noise each level allows in {lo:.3g}..{hi:.3g}"
        )
        if growth <= cfg.reward.chaos_cusum_ratio:
            return None  # the noise such a batch must have at this level
    return _decide(f.severity, "the check's own rule", because)


def _spike(f: Finding, ctx: RunContext, because: Because) -> Severity | None:
    if f.rule != "ceiling":
        return _decide(f.severity, "its own series", because)
    steps = int(f.evidence.get("steps_beyond", 1))
    if steps >= _CEILING_PERSIST:
        return _decide(_CRITICAL, f"beyond the ceiling for {steps} logged steps", because)
    if steps > 1:
        # a KL or gradient that harms drags the reward down; beside a reward that does
        # not fall, two logs beyond the ceiling are a transient (TRL's k3 KL explodes on a
        # few tokens of large log-ratio) until a third one
        because.trend("train_reward", ctx.reward)
        if ctx.reward.way(ctx.t) >= 0 and f.indicator == "kl":
            why = f"beyond the ceiling for {steps} logged steps, the reward not falling"
            return _decide(_INFO, why, because)
        return _decide(_WARNING, f"beyond the ceiling for {steps} logged steps", because)
    if float(f.evidence.get("times_ceiling", 0.0)) >= 100.0:
        return _decide(_WARNING, "one step, but 100 times the ceiling or more", because)
    # one step beyond the ceiling and back is an outlier, not news: an estimate from few
    # tokens jumps and comes back in runs that end well; it is said when it persists, or at
    # once from 100x the ceiling
    return None


def _drift(f: Finding, ctx: RunContext, cfg: EngineConfig, because: Because) -> Severity | None:
    ev = f.evidence
    after = float(ev["after"])
    low, high = float(ev.get("range_low", math.inf)), float(ev.get("range_high", -math.inf))
    if any(fnmatch.fnmatchcase(f.metric, p) for p in cfg.drift.falling_ok):
        if after < float(ev["before"]):
            # memory that falls is freed: no failure
            return None
        if 0.0 <= low <= high <= 1.0 and after < cfg.drift.memory_share_limit:
            # a share of the device's memory that rises with room left: a longer batch's
            # activations, not a leak
            return None
    _learning(ctx, because)
    if low <= after <= high and ctx.still_learning():
        # a generic metric back inside the range it has shown (its warm-up and the values
        # before the change) while the run learns: where it has been, not news (a format
        # reward that dips for a few steps after the run learned it)
        return None
    because.append(f"{f.metric} at {after:.4g}, its range so far {low:.4g}..{high:.4g}")
    return _decide(f.severity, "the check's own rule", because)
