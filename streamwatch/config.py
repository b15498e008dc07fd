"""Typed configuration: every default in one place, validated at start-up.

One module because every setting and its default lives in one place, typed and
checked at start-up, with the loader and the environment's options beside them.

A health check's default is a false-alarm budget or a practical size, said beside it (see the
severity reference's "Budgets and noise models"); ``benchmarks/false_alarms.py`` and
``benchmarks/detection.py`` measure what they give.

A config file is TOML (``.toml``) or JSON::

    [engine.entropy]
    collapse_ratio = 0.08

    [indicators]
    aliases = { "my/policy_entropy" = "entropy" }
"""

from __future__ import annotations

import functools
import json
import os
import tomllib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, create_model

from streamwatch.actions.config import ActionRule
from streamwatch.alerting.config import AlertingConfig
from streamwatch.engine.indicators import PRESETS
from streamwatch.incidents import KINDS, Severity
from streamwatch.rules.config import RuleConfig

__all__ = [
    "ENV_PREFIX",
    "SECTIONS",
    "Config",
    "ConfigError",
    "EngineConfig",
    "EnvOption",
    "SettingsError",
    "env_settings",
    "load_config",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)


class TrendSettings(_Section):
    """A break in a series' own trend (:class:`~streamwatch.detectors.TrendBreak`): each
    value is predicted from the series ``lag`` steps earlier and its slope over the ``span``
    steps before that; the departures, in noise sds, less ``slack`` a step, add up to a
    finding at ``threshold``."""

    lag: int = Field(10, ge=1, description="steps between the prediction's base and the value")
    span: int = Field(20, ge=2, description="steps over which the run's own trend is measured")
    slack: float = Field(
        1.0, ge=0, description="noise sds a step a healthy curve may depart from its trend"
    )
    threshold: float = Field(
        15.0, gt=0, description="summed departure (noise sds, net of slack) that is a finding"
    )
    clip: float = Field(4.0, gt=0, description="most noise sds one step adds (one blip is not one)")
    settle: int = Field(20, ge=2, description="predictions that set the noise unit")


class EntropySettings(_Section):
    warmup: int = Field(5, ge=2, description="steps whose median is the run's reference entropy")
    smoothing: float = Field(0.3, gt=0, le=1, description="EWMA weight of the newest value")
    collapse_ratio: float = Field(0.1, gt=0, lt=1, description="warning below ref x this")
    collapse_critical_ratio: float = Field(
        0.03, gt=0, lt=1, description="critical below ref x this"
    )
    fall_window: int = Field(8, ge=2, description="steps over which the fall rate is measured")
    fall_factor: float = Field(
        1.6, gt=1, description="warning if it fell this many times in the window"
    )
    fall_min_ratio: float = Field(0.3, gt=0, lt=1, description="...and is already below ref x this")
    blowup_ratio: float = Field(1.6, gt=1, description="warning above ref x this")
    rebound_factor: float = Field(2.5, gt=1, description="warning above the run's minimum x this")
    collapse_trend: TrendSettings = Field(
        TrendSettings(threshold=21.0),
        description="a collapse as a fall of the log smoothed entropy below its own trend "
        "(21: the budget's threshold, see trend_arl)",
    )
    blowup_trend: TrendSettings = Field(
        TrendSettings(threshold=21.0),
        description="a blow-up as a climb of the log smoothed entropy above its own trend "
        "(21: the budget's threshold, see trend_arl)",
    )


class RewardSettings(_Section):
    warmup: int = Field(20, ge=3, description="steps before the reward checks judge")
    smoothing: float = Field(0.3, gt=0, le=1)
    chaos_ratio: float = Field(3.0, gt=1, description="recent noise sd / the run's noise sd")
    chaos_window: int = Field(12, ge=4, description="steps whose detrended noise is judged")
    chaos_history: int = Field(50, ge=10, description="past noise figures in the reference")
    chaos_floor: float = Field(
        0.01, ge=0, description="reference noise floor, as a fraction of the reward's range"
    )
    chaos_persist: int = Field(3, ge=1, description="consecutive steps above the ratio")
    chaos_cusum_ratio: float = Field(
        2.0, gt=1, description="noise growth (sd ratio) the chaos CUSUM is tuned to find"
    )
    # A CUSUM of exact log-likelihood ratios crosses h at most once in e^h healthy steps
    # (Wald): the budget of one false finding per series in 10^6 steps asks h >= 13.8. Its
    # steps are clipped squared bends, not exact ratios; simulated on the check itself
    # (benchmarks/trend_arl.py), the budget asks h = 18 on Gaussian noise and 20.4 on
    # Student-t noise of 5 degrees of freedom (heavier-tailed than real detrended rewards).
    chaos_cusum_threshold: float = Field(
        20.0,
        gt=0,
        description="log-likelihood evidence of that growth that is chaos (the budget's "
        "threshold on heavy-tailed noise, see trend_arl)",
    )
    collapse_fraction: float = Field(
        0.3, gt=0, lt=1, description="drop from the peak, as a fraction of the peak's gain"
    )
    collapse_noise: float = Field(6.0, gt=0, description="...and at least this many noise sds")
    collapse_persist: int = Field(3, ge=1)
    collapse_trend: TrendSettings = Field(
        TrendSettings(threshold=21.0),
        description="a collapse as a fall of the smoothed reward below its own trend "
        "(21: the budget's threshold, see trend_arl)",
    )


class LengthSettings(_Section):
    warmup: int = Field(5, ge=2)
    smoothing: float = Field(0.3, gt=0, le=1)
    growth_window: int = Field(
        10,
        ge=2,
        description="logged values over which fast growth is measured (compounded over the "
        "span when it is more than explosion_long_window steps)",
    )
    explosion_growth: float = Field(
        1.5, gt=1, description="warning if it grew this much in the window"
    )
    explosion_ratio: float = Field(2.0, gt=1, description="critical above ref x this while growing")
    explosion_long_window: int = Field(
        30, ge=2, description="a slower explosion: training steps over which length..."
    )
    explosion_long_growth: float = Field(2.0, gt=1, description="...grew this much (warning)")
    collapse_ratio: float = Field(0.5, gt=0, lt=1, description="warning below the peak x this")
    truncation_warning: float = Field(0.3, gt=0, lt=1, description="smoothed clip ratio")
    truncation_critical: float = Field(0.7, gt=0, le=1)
    truncation_rise: float = Field(0.15, gt=0, description="...and this far above its baseline")
    truncation_floor: float = Field(
        0.01,
        gt=0,
        le=1,
        description="a clip ratio climbing above its own trend counts from this level: below "
        "1% it is a few completions of a batch of a few hundred",
    )
    truncation_absolute_warning: float = Field(
        0.5, gt=0, le=1, description="smoothed clip ratio that is a warning from the first step"
    )
    truncation_absolute_critical: float = Field(
        0.9, gt=0, le=1, description="...critical from the first step"
    )
    explosion_trend: TrendSettings = Field(
        TrendSettings(settle=40, threshold=30.0),
        description="an explosion as a climb of the log smoothed length above its own trend "
        "(30: above the budget's threshold, 20, see trend_arl: a healthy length accelerates "
        "as it grows, which a straight extrapolation reads as a climb); "
        "half of it is one too while the length grew half explosion_growth in the window",
    )
    collapse_trend: TrendSettings = Field(
        TrendSettings(settle=40, threshold=20.0),
        description="a collapse as a fall of the log smoothed length below its own trend "
        "(20: the budget's threshold, see trend_arl)",
    )
    truncation_trend: TrendSettings = Field(
        TrendSettings(settle=40, threshold=30.0),
        description="truncation building up: a climb of the smoothed clip ratio above its own "
        "trend (30: above the budget's threshold, 20, see trend_arl: a share of completions "
        "at the cap grows faster than the lengths do as they near it, a curve a straight "
        "extrapolation reads as a climb)",
    )
    max_response_length: int | None = Field(
        None,
        ge=1,
        description="the generation cap in tokens, when known: a mean length at cap_fraction of "
        "it is truncation saturation (every completion at one length is, cap known or not)",
    )
    cap_fraction: float = Field(0.99, gt=0, le=1, description="...of max_response_length")
    min_tokens: int = Field(
        8,
        ge=1,
        description="completions all this short are a model that stops at once (length "
        "collapse), not a cap",
    )


class SpikeSettings(_Section):
    window: int = Field(20, ge=5, description="steps of history the spike is judged against")
    robust_z: float = Field(8.0, gt=0, description="distance from the median in robust sds")
    factor: float = Field(3.0, gt=1, description="and at least this multiple of |median|")
    persist: int = Field(4, ge=2, description="consecutive spiking steps (one blip is not one)")
    grad_norm_ceiling: float = Field(
        1e4,
        gt=0,
        description="a grad norm this large is broken from the first step: 10^4 times the "
        "clipping norm RL trainers use by default (1.0), which then shrinks the update to "
        "nothing",
    )
    kl_ceiling: float = Field(
        10.0,
        gt=0,
        description="a KL estimate this large (|value|), too: 10 nats a token, token "
        "probabilities e^10 apart from the reference's, a different model",
    )
    kl_floor: float = Field(
        0.01,
        ge=0,
        description="a KL estimate smaller than this (|value|) is no spike: a PPO update is "
        "stopped early at 1.5 x a target KL of 0.01 (OpenAI Spinning Up's default), so a KL "
        "under it is an ordinary update",
    )
    range_window: int = Field(
        100, ge=10, description="steps of smoothed grad norm that are the run's own range..."
    )
    range_recent: int = Field(
        30,
        ge=1,
        description="...but the last this many (the climb being judged, lag + span of its trend)",
    )
    growth_factor: float = Field(
        3.0,
        gt=1,
        description="a grad norm whose median of its last 5 values is this many times the "
        "median of its own range (the steps before the last range_recent)...",
    )
    growth_persist: int = Field(
        5,
        ge=1,
        description="...for this many logged steps in a row grew (a practical size: updates "
        "3x larger before clipping; on a log-normal grad norm of a log-sd of 0.25 that median "
        "is about 8 of its sds away from the level)",
    )
    growth_trend: TrendSettings = Field(
        TrendSettings(slack=0.5, threshold=29.0),
        description="a grad norm that grows away from its own trend (the log of the median "
        "of its last 5 values: isolated spikes do not count; 29: the budget's threshold for "
        "values that smoothed, see trend_arl)",
    )


class HackingSettings(_Section):
    min_evals: int = Field(4, ge=3, description="held-out evaluations before judging")
    reference: int = Field(20, ge=3, description="evaluations in the held-out reference")
    min_reference: int = Field(
        8,
        ge=3,
        description="evaluations of the held-out's level before a fall is judged (a level of "
        "3-5 that came out high read a flat held-out as a fall)",
    )
    slack: float = Field(0.5, ge=0, description="CUSUM allowance, eval-noise sds per evaluation")
    threshold: float = Field(4.0, gt=0, description="CUSUM decision level, eval-noise sds")
    drop: float = Field(0.02, gt=0, description="and a held-out fall of at least this (absolute)")
    drop_share: float = Field(
        0.1,
        gt=0,
        le=1,
        description="...or of this share of the held-out's level, when that is less (a "
        "recommender's validation NDCG@10 lives at 0.02: it cannot fall by 0.02)",
    )
    fall_evals: int = Field(
        6,
        ge=4,
        description="evaluations each below the one before, a fall that needs no level "
        "(a run evaluated 6 times has none of min_reference evaluations to judge by)",
    )
    drop_evals: int = Field(
        3, ge=1, description="...in the mean of the last this many evaluations below the level"
    )
    train_rise: float = Field(
        0.0, ge=-1, le=1, description="train reward gain since the reference, at least"
    )
    train_rise_sds: float = Field(
        3.0,
        ge=0,
        description="...and more than this many sds of chance (the train reward's mean over "
        "the evaluation's period against the reference's): it is asked anew at each "
        "evaluation of a fall, and at 2 a flat train reward beside a falling held-out read as "
        "a rise in 23 runs of 200 (at 3: 4)",
    )
    noise_window: int = Field(
        50, ge=3, description="second differences in the eval and train noise estimates"
    )
    components: tuple[str, ...] = Field(
        ("rewards/*", "train/rewards/*"), description="metric globs of per-function rewards"
    )
    component_exclude: tuple[str, ...] = Field(
        ("*/std", "*/min", "*/max"), description="...that are not a component's mean"
    )
    verifiable: tuple[str, ...] = Field(
        ("*accura*", "*correct*", "*verif*", "*math*", "*code*", "*pass*", "*exact*"),
        description="lower-cased globs of the components that check the answer itself",
    )
    not_verifiable: tuple[str, ...] = Field(
        ("*format*", "*xml*", "*style*"),
        description="lower-cased globs of components that check the look, whatever else their "
        "name says (Unsloth's match_format_exactly is a format reward, not an exact match)",
    )
    component_min_logs: int = Field(3, ge=2, description="logs of both before judging")
    component_drop: float = Field(
        0.05, gt=0, description="a verifiable component this far below its start..."
    )
    component_drop_fraction: float = Field(0.5, gt=0, le=1, description="...and this share of it")
    component_rise: float = Field(
        0.2, gt=0, description="while another is this far above its own start, and rose more"
    )


class DriftSettings(_Section):
    warmup: int = Field(10, ge=3)
    delta: float = Field(0.002, gt=0, lt=1, description="ADWIN confidence")
    clock: int = Field(4, ge=1, description="ADWIN checks every this many updates")
    min_effect_sds: float = Field(
        4.0,
        gt=0,
        description="a change found by ADWIN counts beyond this many sds of the values "
        "before it, from where their own trend was heading (4: a departure independent "
        "Gaussian noise passes once in about 30,000 values)...",
    )
    min_relative: float = Field(
        0.04,
        ge=0,
        description="...and beyond this fraction of its level (a practical size: a change "
        "smaller than that is too small to matter)",
    )
    severity: Severity = Severity.INFO
    each_episode: bool = Field(
        True,
        description="announce each drift of a metric (once the one before it resolved), not "
        "only its first: a drift is a change between two levels, not a state that stays true",
    )
    falling_ok: tuple[str, ...] = Field(
        ("*memory*",),
        description="metric globs whose fall is no failure: memory that falls is freed; a "
        "rise is reported",
    )
    memory_share_limit: float = Field(
        0.9,
        gt=0,
        le=1,
        description="...from this level on when their values are a share of the device "
        "(0..1): below it the device has room (vLLM reserves 0.9 of a GPU by default, its "
        "gpu_memory_utilization: a longer batch's activations fill the room it leaves)",
    )
    ignore: tuple[str, ...] = Field(
        (
            "training/global_step",
            "training/epoch",
            "epoch",
            "*learning_rate",
            "*/lr",
            "lr",
            "global_seqlen/*",
            "*num_tokens*",
            "prompt_length/*",
            "response_length/*",
        ),
        description="metric globs with no drift check: counters and schedules trend by design; "
        "token counts and sequence-length statistics follow the response length, which the "
        "length checks watch",
    )


class MismatchSettings(_Section):
    warmup: int = Field(10, ge=3, description="steps whose median is the run's own level")
    smoothing: float = Field(0.3, gt=0, le=1, description="EWMA weight of the newest value")
    ratio: float = Field(3.0, gt=1, description="smoothed gap this many times its level...")
    robust_z: float = Field(8.0, gt=0, description="...and this many warm-up sds above it")
    noise_floor: float = Field(
        0.05, gt=0, description="warm-up sd at least this share of the level (steady gaps)"
    )
    persist: int = Field(3, ge=1, description="steps in a row")
    critical_ratio: float = Field(10.0, gt=1, description="critical this many times its level")
    growth_trend: TrendSettings = Field(
        TrendSettings(lag=20, span=40, settle=40, threshold=24.0),
        description="a gap growing slowly: a climb of the log smoothed gap above its own trend, "
        "judged over 20 steps (a steady growth bends the log little; 24: the budget's "
        "threshold, see trend_arl)",
    )


class SignalSettings(_Section):
    zero_variance_all: float = Field(
        0.99, gt=0, le=1, description="zero-variance groups fraction that means every group"
    )
    zero_variance_warning: float = Field(
        0.9, gt=0, le=1, description="...that means most of the batch teaches nothing"
    )
    persist: int = Field(3, ge=1, description="steps in a row for the conditions that need it")
    zero_grad_persist: int = Field(2, ge=1, description="steps in a row of a gradient of 0")
    critical_steps: int = Field(10, ge=1, description="steps in a row before it is critical")
    smoothing: float = Field(
        0.3, gt=0, le=1, description="EWMA weight of the newest value of a draining series"
    )
    drain_trend: TrendSettings = Field(
        TrendSettings(threshold=22.0),
        description="the signal draining: the share of groups that still differ (one minus the "
        "zero-variance fraction), the reward's std and one minus a [0, 1] train reward "
        "falling below their own trend, their summed evidence over the square root of their "
        "number (22: above one series' budget threshold, 21, see trend_arl)",
    )


class StallSettings(_Section):
    factor: float = Field(5.0, gt=1, description="stalled after this many cadences of silence")
    min_seconds: float = Field(60.0, ge=0, description="...and at least this long")
    min_steps: int = Field(3, ge=2, description="steps needed to know the cadence")
    future_seconds: float = Field(
        300.0,
        gt=0,
        description="an event time this far past the clock (live) or the newest event time "
        "(replay) is not trusted: the event is judged without it",
    )


class StragglerSettings(_Section):
    min_peers: int = Field(3, ge=3, description="sources reporting the same step")
    robust_z: float = Field(5.0, gt=0, description="distance from the peers' median in robust sds")
    ratio: float = Field(1.3, gt=1, description="and at least this many times slower")
    persist: int = Field(5, ge=1, description="consecutive steps")
    behind_steps: int = Field(
        10, ge=1, description="a source this many steps further behind the run than usual"
    )
    trend_warmup: int = Field(
        10, ge=1, description="steps that set each source's usual offset and the ranks' spread"
    )
    trend_slack: float = Field(
        1.0, ge=0, description="spreads a step a source may be slower than usual by chance"
    )
    trend_threshold: float = Field(
        10.0,
        gt=0,
        description="summed slowness (spreads, net of slack) that is a straggler (healthy "
        "simulated runs of 4 ranks reach 5)",
    )
    trend_ratio: float = Field(
        1.1, gt=1, description="...if it is at least this many times slower than the median"
    )
    max_sources: int = Field(4096, ge=3, description="sources followed per series")


class CostSettings(_Section):
    """What an incident costs (:mod:`streamwatch.engine.cost`): steps since its onset x the run's
    step time x its GPUs."""

    gpus: int | None = Field(
        None,
        ge=1,
        description="GPUs per run, when the events carry no gpus tag (else: verl's perf "
        "metrics, or the processes seen publishing)",
    )
    window: int = Field(32, ge=1, description="newest steps whose mean time is the step time")


class ProjectionSettings(_Section):
    """Where a failure that builds is heading (:mod:`streamwatch.engine.projection`)."""

    window: int = Field(
        40, ge=8, description="newest values (evaluations, for held-out) kept per series"
    )
    min_points: int = Field(6, ge=4, description="values the fitted part needs at least")
    min_evals: int = Field(4, ge=4, description="...for held-out, evaluations")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="of the crossing's interval")
    max_extrapolation: float = Field(
        5.0, gt=0, description="crossings at most this many times the fitted span ahead"
    )


class ContextSettings(_Section):
    """The run's context that findings are judged in (:mod:`streamwatch.checks.context`)."""

    trend_t: float = Field(
        2.0,
        gt=0,
        description="a series rises or falls when its least-squares slope is this many "
        "standard errors from 0 (about 5% by chance, one-sided)",
    )
    min_points: int = Field(5, ge=3, description="values of a per-step series before its way")
    min_evals: int = Field(3, ge=3, description="held-out evaluations before their way")
    reward_window: int = Field(20, ge=3, description="train reward values its way is told by")
    heldout_window: int = Field(6, ge=3, description="held-out evaluations their way is told by")
    truncation_window: int = Field(20, ge=3, description="clip ratio values its way is told by")
    course_window: int = Field(
        60,
        ge=3,
        description="clip ratio values whose Theil-Sen slope and Kendall interval say whether a "
        "high ratio falls (the run's whole course while it is shorter)",
    )
    course_t: float = Field(
        3.0,
        gt=0,
        description="sds of Kendall's S either side of the clip ratio's Theil-Sen slope: its "
        "interval. It is asked again at every step: over 60 steps of a flat ratio with 15% "
        "noise, 2 sds call it rising at some step in 40% of runs, 3 sds in 3%",
    )
    fix_steps: int = Field(
        200,
        ge=1,
        description="a high clip ratio that cannot be falling fast enough to halve within this "
        "many steps is shown not to fall: the policy is not learning to finish before the cap",
    )
    length_window: int = Field(20, ge=3, description="mean length values its way is told by")
    low_truncation: float = Field(
        0.1,
        gt=0,
        le=1,
        description="a clip ratio below this is low: length growth beside it, not falling "
        "reward, is the expected course of reasoning RL (info)",
    )
    critical_steps: int = Field(
        20, ge=1, description="steps a high clip ratio that is not falling persists: critical"
    )


#: Bytes one tracked series can hold (its windows and detectors, measured: about 5 KB).
BYTES_PER_SERIES = 5_000
#: The share of the machine's memory the default run bound lets the runs' state take.
MEMORY_SHARE = 0.5


def default_max_runs(series_per_run: int = 2_000, memory: int | None = None) -> int:
    """The default run bound: 10,000, or fewer when that many runs of ``series_per_run``
    series each would not fit in half of the machine's memory (``memory`` bytes, by default
    read with ``os.sysconf``); at least 100.

    >>> default_max_runs(memory=24 * 2**30)
    1288
    >>> default_max_runs(memory=2**40)
    10000
    """
    if memory is None:
        try:
            memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (AttributeError, OSError, ValueError):  # not a POSIX system: the old default
            return 10_000
    fit = int(memory * MEMORY_SHARE / (series_per_run * BYTES_PER_SERIES))
    return max(100, min(10_000, fit))


class EngineConfig(_Section):
    resolve_after: int = Field(
        20, ge=1, description="healthy updates (at most one an event) before an incident resolves"
    )
    settle: float = Field(
        0.1,
        ge=0.0,
        le=1.0,
        description="and healthy for this share of the run's steps so far: one episode a drift",
    )
    entropy: EntropySettings = EntropySettings()
    reward: RewardSettings = RewardSettings()
    length: LengthSettings = LengthSettings()
    spike: SpikeSettings = SpikeSettings()
    hacking: HackingSettings = HackingSettings()
    drift: DriftSettings = DriftSettings()
    signal: SignalSettings = SignalSettings()
    mismatch: MismatchSettings = MismatchSettings()
    stall: StallSettings = StallSettings()
    straggler: StragglerSettings = StragglerSettings()
    cost: CostSettings = CostSettings()
    projection: ProjectionSettings = ProjectionSettings()
    context: ContextSettings = ContextSettings()
    disabled_kinds: tuple[str, ...] = ()
    max_runs: int = Field(
        default_factory=lambda: default_max_runs(),
        ge=1,
        description="runs tracked at once (default: 10,000, or what fits in half of this "
        "machine's memory); past it the tenth least recently heard from is forgotten (runs "
        "with open incidents last)",
    )
    resume_grace_steps: int = Field(
        10,
        ge=0,
        description="after a resume: steps the spike, reward, mismatch and drift "
        "checks are not fed (a resumed run's first steps are off)",
    )
    max_open_steps: int = Field(
        64, ge=1, description="steps a series waits for every source (ranks apart, late)"
    )
    max_series_per_run: int = Field(
        2_000, ge=1, description="metrics tracked per run; values of more are set aside"
    )
    max_metrics_per_event: int = Field(
        2_000, ge=1, description="metrics read from one event; the rest are set aside"
    )

    def model_post_init(self, __context: Any) -> None:
        unknown = [k for k in self.disabled_kinds if k not in KINDS]
        if unknown:
            raise ValueError(f"disabled_kinds: unknown kind(s) {unknown}; known: {list(KINDS)}")


class IndicatorSettings(_Section):
    presets: tuple[str, ...] = tuple(PRESETS)
    aliases: dict[str, str] = Field(default_factory=dict, description="metric glob -> indicator")
    patterns: bool = Field(
        True, description="bind names no alias or preset knows by their words (mean_reward)"
    )


class Config(_Section):
    engine: EngineConfig = EngineConfig()
    indicators: IndicatorSettings = IndicatorSettings()
    alerting: AlertingConfig = AlertingConfig()
    actions: tuple[ActionRule, ...] = Field((), description="[[actions]]: what to do, when")
    rules: tuple[RuleConfig, ...] = Field(
        (), description="[[rules]]: a team's own conditions on its metrics (user_rule incidents)"
    )

    def model_post_init(self, __context: Any) -> None:
        for table, names in (
            ("actions", [r.name for r in self.actions]),
            ("rules", [r.name for r in self.rules]),
        ):
            dupes = sorted({n for n in names if names.count(n) > 1})
            if dupes:
                raise ValueError(f"{table}: duplicate name(s) {dupes}; give each rule its own name")


#: The tables of a config file.
SECTIONS = ("engine", "indicators", "alerting", "actions", "rules")


class ConfigError(ValueError):
    """A config file that cannot be used; the message says which file and which key."""


def load_config(path: str | Path | None, *, sections: tuple[str, ...] = SECTIONS) -> Config:
    """Read and validate a config file (.toml or .json); None gives the defaults.

    The one reader of config files. ``sections``: the tables the command uses; the others
    keep their defaults and are not looked at, so that a mistake in the engine's table does
    not stop ``streamwatch silence``. An unknown table is an error either way.
    """
    if path is None:
        return Config()
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read config: {exc.strerror}") from exc
    try:
        data: Any = tomllib.loads(text) if p.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{p}: not valid {p.suffix.lstrip('.') or 'JSON'}: {exc}") from exc
    if isinstance(data, dict):
        unknown = sorted(k for k in data if k not in SECTIONS)
        if unknown:
            hints = "".join(_did_you_mean(str(k), SECTIONS) for k in unknown)
            raise ConfigError(f"{p}: unknown table(s) {unknown}{hints}; known: {list(SECTIONS)}")
        data = {k: v for k, v in data.items() if k in sections}
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        lines = [
            f"{p}: {'.'.join(str(x) for x in e['loc'])}: {_said(e['msg'])}{_hint(e)}"
            for e in exc.errors(include_url=False)
        ]
        raise ConfigError("\n".join(lines)) from exc


def _hint(error: Any) -> str:
    """For a key no table has (a typo): the closest known key of its table, if one is close.

    >>> _hint({"type": "extra_forbidden", "loc": ("engine", "resolve_afterr")})
    "; did you mean 'resolve_after'?"
    """
    if error.get("type") != "extra_forbidden" or not error.get("loc"):
        return ""
    *where, key = error["loc"]
    model = _model_at(Config, where)
    if model is None:
        return ""
    known = [name for name in model.model_fields] + [
        f.alias for f in model.model_fields.values() if f.alias
    ]
    return _did_you_mean(str(key), known)


def _did_you_mean(key: str, known: Sequence[str]) -> str:
    import difflib

    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _model_at(model: type[BaseModel], loc: Sequence[Any]) -> type[BaseModel] | None:
    """The model of the table at ``loc`` (``("alerting", "receivers", 0)``), or None."""
    current: type[BaseModel] | None = model
    for part in loc:
        if current is None:
            return None
        if isinstance(part, int):
            continue
        fields = current.model_fields
        field = fields.get(part) or next((f for f in fields.values() if f.alias == part), None)
        if field is None:
            return None
        current = _inner_model(field.annotation)
    return current


def _inner_model(tp: Any) -> type[BaseModel] | None:
    """The model in an annotation (``list[Receiver]``, ``Receiver | None``), or None."""
    import inspect
    from typing import get_args

    if inspect.isclass(tp) and issubclass(tp, BaseModel):
        return tp
    for arg in get_args(tp):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _said(msg: str) -> str:
    """A validation error's words without pydantic's "Value error, " before them."""
    return msg.removeprefix("Value error, ")


# -- settings of a command from the environment ------------------------------------------

#: Every command-line option's variable: ``--partitions`` reads ``STREAMWATCH_PARTITIONS``.
ENV_PREFIX = "STREAMWATCH_"


@dataclass(frozen=True, slots=True)
class EnvOption:
    """A command's option whose value may come from its ``STREAMWATCH_*`` variable."""

    dest: str  # the option's name, ``bootstrap_servers`` for ``--bootstrap-servers``
    kind: type[Any] = str  # int, float or str
    default: Any = None
    choices: tuple[str, ...] = ()
    secret: bool = False

    @property
    def variable(self) -> str:
        return ENV_PREFIX + self.dest.upper()

    @property
    def flag(self) -> str:
        return "--" + self.dest.replace("_", "-")


class SettingsError(ValueError):
    """Settings from the environment that cannot be used; names each variable."""


@functools.cache
def _from_environment() -> type[BaseModel]:
    """The base of a command's settings: read from ``STREAMWATCH_*`` (imported when a
    command runs, not for ``--help``)."""
    from pydantic_settings import BaseSettings, SettingsConfigDict

    class FromEnvironment(BaseSettings):
        model_config = SettingsConfigDict(
            env_prefix=ENV_PREFIX, extra="ignore", frozen=True, hide_input_in_errors=True
        )

    return FromEnvironment


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    def check(value: str) -> str:
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return value

    return check


def env_settings(options: Sequence[EnvOption]) -> dict[str, Any]:
    """The validated values of the options whose ``STREAMWATCH_*`` variable is set.

    Only these options are read (those of the command being run), with the type and the
    choices the command line has; one bad value raises :class:`SettingsError` naming the
    variable, its value (unless secret) and the option it stands for.

    >>> import os
    >>> os.environ["STREAMWATCH_PARTITIONS"] = "abc"
    >>> env_settings([EnvOption("partitions", int, 4)])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    streamwatch.config.SettingsError: STREAMWATCH_PARTITIONS='abc' (for --partitions): ...integer
    >>> os.environ["STREAMWATCH_PARTITIONS"] = "8"
    >>> env_settings([EnvOption("partitions", int, 4), EnvOption("topic")])
    {'partitions': 8}
    >>> del os.environ["STREAMWATCH_PARTITIONS"]
    """
    fields: dict[str, Any] = {}
    for o in options:
        kind: Any = Annotated[str, AfterValidator(_one_of(o.choices))] if o.choices else o.kind
        fields[o.dest] = (kind | None, None)
    model = create_model("CommandSettings", __base__=_from_environment(), **fields)
    try:
        values = model()
    except ValidationError as exc:
        by_dest = {o.dest: o for o in options}
        raise SettingsError("\n".join(_env_problem(e, by_dest) for e in exc.errors())) from None
    return {name: getattr(values, name) for name in values.model_fields_set}


def _env_problem(error: Any, options: dict[str, EnvOption]) -> str:
    o = options[str(error["loc"][0])]
    raw = next((v for k, v in os.environ.items() if k.upper() == o.variable), "")
    shown = "(secret)" if o.secret else repr(raw)
    msg = str(error["msg"]).removeprefix("Value error, ")
    return f"{o.variable}={shown} (for {o.flag}): {msg[:1].lower()}{msg[1:]}"
