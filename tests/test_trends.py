"""Gradual failures: a break in a series' own trend, the chaos CUSUM, a slowly slowing rank,
a slowly growing grad norm; the generic drift screen's confirmation (noise, trend, copies).

Each detector is fed the curves it must stay quiet on (healthy curves that fall and settle,
single-step blips) and the ramp it must find, with the number of steps it may take."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
from pathlib import Path
from types import ModuleType

import pytest
from librt.vecs import vec

from streamwatch.checks import (
    DriftColumn,
    EntropyCheck,
    RewardCheck,
    SpikeCheck,
    StragglerCheck,
    screen,
)
from streamwatch.checks.drift import drop_copies
from streamwatch.config import EngineConfig
from streamwatch.detectors import TrendBreak, trend_break
from streamwatch.engine.findings import Finding
from streamwatch.incidents import Kind, Severity, Status
from streamwatch.replay.files import replay_files
from streamwatch.simulate import healthy_spec
from streamwatch.simulate.scoring import replay_spec

_E = EngineConfig()
REAL = sorted((Path(__file__).parent / "data" / "real").glob("*.jsonl"))


def _gauss(n: int, sd: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(0.0, sd) for _ in range(n)]


def _entropy_level(t: int) -> float:
    """An entropy that falls 5x with a 30-step time constant (healthy)."""
    return 0.08 + 0.32 * math.exp(-t / 30.0)


def _settling(n: int, seed: int) -> list[float]:
    """That entropy with 4% noise."""
    return [_entropy_level(t) * math.exp(e) for t, e in enumerate(_gauss(n, 0.04, seed))]


def _first(findings: list[Finding], kind: Kind) -> int | None:
    return next((f.step for f in findings if f.kind is kind), None)


def _feed(check: EntropyCheck | SpikeCheck, values: list[float]) -> list[Finding]:
    return [f for step, x in enumerate(values) for f in check.update(step, x)]


# -- the detector ----------------------------------------------------------------------------


def test_trend_break_credits_a_trend_that_moves_its_way() -> None:
    # a straight fall, noisy: "down" extrapolates it, so only a steeper fall adds up
    noise = _gauss(300, 0.02, 1)
    down = TrendBreak("down")
    falling = [-0.01 * t + e for t, e in enumerate(noise)]
    assert not any(down.update(y) for y in falling)
    steeper = [falling[-1] - 0.03 * k + e for k, e in enumerate(_gauss(30, 0.02, 2), 1)]
    hits = [down.update(y) for y in steeper]
    assert True in hits and hits.index(True) < 15


def test_trend_break_does_not_extrapolate_a_trend_away_from_it() -> None:
    # a fall that settles is no climb: "up" predicts its last level, not its fall
    up = TrendBreak("up")
    assert not any(up.update(math.log(v)) for v in _settling(400, 3))


def test_trend_break_is_not_tripped_by_one_blip() -> None:
    t = TrendBreak("up")
    values = _gauss(100, 0.02, 4)
    values[60] = 5.0  # 250 sds, once
    assert not any(t.update(y) for y in values)
    assert t.statistic < t.threshold


def _ar1(n: int, phi: float, sd: float, seed: int) -> list[float]:
    """AR(1) noise of marginal sd ``sd``: a batch-averaged metric that wanders."""
    rng = random.Random(seed)
    x, out = 0.0, []
    for _ in range(n):
        x = phi * x + rng.gauss(0.0, sd * math.sqrt(1.0 - phi * phi))
        out.append(x)
    return out


def _smoothed(raw: list[float], alpha: float = 0.3) -> list[float]:
    out, s = [], raw[0]
    for x in raw:
        s += alpha * (x - s)
        out.append(s)
    return out


def _healthy_then_fall(
    phi: float, seed: int, raw_given: bool, fall: float = 0.02
) -> tuple[bool, int | None]:
    """The entropy check's detector on 2,000 healthy steps of AR(1) noise (sd 0.04 in log
    units), then on a fall of ``fall`` a step: (crossed while healthy, the fall's delay)."""
    down = trend_break("down", _E.entropy.collapse_trend)
    raw = _ar1(2000, phi, 0.04, seed)
    drop = [raw[-1] - fall * k + e for k, e in enumerate(_ar1(80, phi, 0.04, 99 + seed), 1)]
    smooth = _smoothed(raw + drop)
    hits = [
        down.update(y, x) if raw_given else down.update(y)
        for y, x in zip(smooth, raw + drop, strict=True)
    ]
    after = hits[2000:]
    return any(hits[:2000]), (after.index(True) if True in after else None)


def test_trend_break_sums_correlated_noise_in_the_units_of_its_sum() -> None:
    """Noise correlated from step to step (AR(1), phi 0.8: a batch-averaged metric) moves in
    runs of one sign: summed as if independent, its departures climb on healthy runs; given
    the raw values, the detector learns their correlation and sums in the units of a sum of
    correlated values: no healthy run crosses, and a fall of a noise sd a step is found."""
    given = [_healthy_then_fall(0.8, seed, True, fall=0.04) for seed in range(40)]
    alone = [_healthy_then_fall(0.8, seed, False, fall=0.04) for seed in range(40)]
    assert sum(crossed for crossed, _ in given) <= 1 < 3 <= sum(crossed for crossed, _ in alone)
    delays = sorted(d for _, d in given if d is not None)
    assert len(delays) >= 36 and delays[len(delays) // 2] <= 20


def test_independent_noise_costs_nothing() -> None:
    """On independent noise the raw values change nothing: the same alarms, the same delays
    (those the threshold was set for)."""
    for seed in range(10):
        assert _healthy_then_fall(0.0, seed, True) == _healthy_then_fall(0.0, seed, False)


def test_independent_noise_shows_no_correlation() -> None:
    """Independent noise, with a trend and a bend, is not taken for correlated: its unit
    stays 1, so the check's delays on it are those it was calibrated with."""
    down = TrendBreak("down")
    raw = [0.5 * math.exp(-t / 200.0) + e for t, e in enumerate(_gauss(1000, 0.02, 7))]
    for y, x in zip(_smoothed(raw), raw, strict=True):
        down.update(y, x)
    assert down.correlation.shown() == 0.0 and down.correlation.unit == 1.0


def test_trend_break_rejects_an_unknown_mode() -> None:
    with pytest.raises(ValueError, match="mode"):
        TrendBreak("sideways")


# -- entropy: a slide that a ratio to the start sees late ---------------------------------


def test_entropy_sliding_to_zero_is_found_long_before_it_gets_there() -> None:
    healthy = _settling(400, 5)
    assert _feed(EntropyCheck("entropy", "actor/entropy", _E.entropy), healthy) == []
    onset, ramp = 200, 80  # from its settled level to 0 in 80 steps, linearly
    slide = healthy[:onset] + [
        max(_entropy_level(t) * (1.0 - (t - onset + 1) / ramp), 1e-3) * math.exp(e)
        for t, e in zip(range(onset, 400), _gauss(200, 0.04, 6), strict=True)
    ]
    found = _feed(EntropyCheck("entropy", "actor/entropy", _E.entropy), slide)
    step = _first(found, Kind.ENTROPY_COLLAPSE)
    assert step is not None and onset <= step <= onset + 20, step  # a quarter of the way


# -- grad norm: slow growth, single spikes ---------------------------------------------------


def _grad(n: int, seed: int) -> list[float]:
    return [0.1 * math.exp(e) for e in _gauss(n, 0.1, seed)]


def test_grad_norm_growing_slowly_is_a_spike_finding() -> None:
    base = _grad(300, 7)
    grown = base[:150] + [
        x * (1.0 + 9.0 * min(1.0, (k + 1) / 60)) for k, x in enumerate(base[150:])
    ]
    check = SpikeCheck("grad_norm", "actor/grad_norm", _E.spike, _E.spike.grad_norm_ceiling)
    step = _first(_feed(check, grown), Kind.METRIC_SPIKE)
    assert step is not None and 150 <= step <= 170, step


def test_single_step_blips_of_grad_norm_and_kl_raise_nothing() -> None:
    grad = _grad(300, 8)
    kl = [1e-4 * e for e in _gauss(300, 1.0, 9)]  # a signed estimate around 0 (ppo_kl)
    for step in (50, 52, 120, 200):  # never two in a row, once two steps apart
        grad[step] *= 60.0
        kl[step] = 0.05
    g = SpikeCheck("grad_norm", "actor/grad_norm", _E.spike, _E.spike.grad_norm_ceiling)
    k = SpikeCheck("kl", "actor/ppo_kl", _E.spike, _E.spike.kl_ceiling)
    assert _feed(g, grad) == []
    assert _feed(k, kl) == []


# -- a rank slowing down ------------------------------------------------------------------


def _ranks(steps: int, slow_from: int | None, seed: int) -> list[list[tuple[str, float]]]:
    rng = random.Random(seed)
    bias = [rng.gauss(0.0, 0.01) for _ in range(4)]
    out = []
    for t in range(steps):
        shared = rng.gauss(0.0, 0.03)
        row = []
        for r in range(4):
            factor = 1.0
            if slow_from is not None and r == 3 and t >= slow_from:
                factor += 1.0 * min(1.0, (t - slow_from + 1) / 80)  # 2x slower after 80 steps
            row.append(
                (
                    f"node-1/rank-{r}",
                    30.0 * math.exp(shared + bias[r] + rng.gauss(0, 0.015)) * factor,
                )
            )
        out.append(row)
    return out


def test_a_rank_that_slows_down_gradually_is_a_straggler() -> None:
    healthy = StragglerCheck("step_time", "timing_s/step", _E.straggler, True)
    assert [f for t, row in enumerate(_ranks(300, None, 10)) for f in healthy.update(t, row)] == []
    check = StragglerCheck("step_time", "timing_s/step", _E.straggler, True)
    found = [f for t, row in enumerate(_ranks(300, 150, 10)) for f in check.update(t, row)]
    step = _first(found, Kind.RANK_STRAGGLER)
    assert step is not None and 150 <= step <= 165, step
    assert found[0].evidence["source"] == "node-1/rank-3"


def test_sources_followed_are_bounded() -> None:
    check = StragglerCheck("step_time", "timing_s/step", _E.straggler, True)
    for t in range(20):
        check.update(t, [(f"r{t}-{i}", 1.0 + 0.01 * i) for i in range(1000)])
    assert len(check.sources) == _E.straggler.max_sources


# -- the generic drift screen --------------------------------------------------------------


def _screened(columns: list[DriftColumn], rows: list[list[float]]) -> list[Finding]:
    return [f for t, row in enumerate(rows) for f in screen(t, columns, vec[float](row))]


def test_a_slide_smaller_than_20_percent_is_a_drift_when_it_is_many_noise_sds() -> None:
    noise = _gauss(300, 0.015, 11)
    mfu = [
        0.4 * (1.0 - 0.4 * min(1.0, max(0, t - 150 + 1) / 60)) * math.exp(e)
        for t, e in enumerate(noise)
    ]
    found = _screened([DriftColumn("perf/mfu", "perf/mfu", _E.drift)], [[x] for x in mfu])
    assert found and 150 <= found[0].step <= 170
    assert abs(found[0].evidence["before"] - 0.4) < 0.01
    assert found[0].evidence["change_sds"] > _E.drift.min_effect_sds


def test_a_shift_within_the_series_noise_is_not_a_drift() -> None:
    # 25% of its level, but the series' own noise is 40% (a clip fraction)
    values = [0.001 * math.exp(e) for e in _gauss(300, 0.4, 12)]
    values = values[:150] + [0.75 * v for v in values[150:]]
    assert (
        _screened(
            [DriftColumn("actor/pg_clipfrac", "actor/pg_clipfrac", _E.drift)], [[x] for x in values]
        )
        == []
    )


def test_a_healthy_decay_that_settles_is_not_a_drift() -> None:
    noise = _gauss(400, 0.4, 13)
    decay = [0.003 * (0.1 + 0.9 * math.exp(-t / 40.0)) * math.exp(e) for t, e in enumerate(noise)]
    assert (
        _screened(
            [DriftColumn("actor/pg_clipfrac", "actor/pg_clipfrac", _E.drift)], [[x] for x in decay]
        )
        == []
    )


def test_of_two_copies_only_the_first_by_name_drifts() -> None:
    noise = _gauss(200, 0.01, 14)
    values = [(1.0 if t < 120 else 1.5) + e for t, e in enumerate(noise)]
    returns = DriftColumn("critic/returns/mean", "critic/returns/mean", _E.drift)
    advantages = DriftColumn("critic/advantages/mean", "critic/advantages/mean", _E.drift)
    found = _screened([returns, advantages], [[x, x] for x in values])
    assert [f.metric for f in found] == ["critic/advantages/mean"]


def test_a_drift_whose_value_copies_another_metric_of_the_event_is_dropped() -> None:
    f = Finding(
        Kind.METRIC_DRIFT, "critic/rewards/mean", "critic/rewards/mean", Severity.INFO, 9, "", {}
    )
    event = {"critic/score/mean": 0.6132, "critic/rewards/mean": 0.6132, "actor/lr": 1e-6}
    assert drop_copies([f], event) == []
    assert drop_copies([f], {**event, "critic/score/mean": 0.6}) == [f]
    assert drop_copies([f], {"critic/score/mean": 1.0, "critic/rewards/mean": 1.0}) == [f]


@pytest.mark.parametrize("path", REAL, ids=[p.stem for p in REAL])
def test_real_runs_raise_no_incident_at_all(path: Path) -> None:
    fired = [i for i in replay_files([path]).incidents if i.status is Status.FIRING]
    assert fired == [], [f"{i.step} {i.kind} {i.metric}: {i.message}" for i in fired]


def test_real_rows_have_the_copies_the_screen_drops() -> None:
    # GRPO: advantages and returns are the same series (tests/data/real, verl)
    rows = [json.loads(line)["metrics"] for line in REAL[0].read_text().splitlines()[1:]]
    assert all(r["critic/advantages/mean"] == r["critic/returns/mean"] for r in rows)


@pytest.mark.parametrize("seed", range(5))
def test_healthy_simulated_runs_raise_no_incident_at_all(seed: int) -> None:
    incidents = replay_spec(healthy_spec(f"healthy-{seed}", seed))
    fired = [i for i in incidents if i.status is Status.FIRING]
    assert fired == [], [f"{i.step} {i.kind} {i.metric}: {i.message}" for i in fired]


def test_a_generic_copy_of_an_rl_metric_raises_no_drift_in_the_engine() -> None:
    """verl logs ``critic/rewards/mean`` equal to ``critic/score/mean`` when the reward has
    no KL term: the train reward's checks watch the one, the copy must not drift alone."""
    from streamwatch.engine.monitor import Monitor
    from streamwatch.events import Event

    rng = random.Random(5)
    monitor = Monitor()
    kinds = []
    for step in range(1, 200):
        level = 0.3 if step < 100 else 0.6
        x = level + rng.gauss(0.0, 0.01)
        metrics = {"critic/score/mean": x, "critic/rewards/mean": x, "perf/mfu": 0.4}
        kinds += [
            (u.kind, u.metric)
            for u in monitor.process(Event(run_id="r", step=step, metrics=metrics))
        ]
    assert ("metric_drift", "critic/rewards/mean") not in kinds


# -- thresholds from the budget ------------------------------------------------------------


def _trend_arl() -> ModuleType:
    path = Path(__file__).resolve().parent.parent / "benchmarks" / "trend_arl.py"
    spec = importlib.util.spec_from_file_location("trend_arl", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_a_trend_threshold_buys_its_budget() -> None:
    """The entropy check's trend break on healthy noise smoothed as the check smooths it:
    ``ln ARL0`` is straight in the threshold, and its configured threshold is at least the
    one that buys an ARL0 of 10^6 steps (benchmarks/trend_arl.py; a shorter simulation here,
    so its estimate is allowed one unit of slack)."""
    arl = _trend_arl()
    use = next(u for u in arl.uses() if u.name == "entropy.collapse_trend")
    steps = 60_000
    counts = arl.crossings(use, steps, seed=1)
    assert all(a >= b for a, b in zip(counts.values(), list(counts.values())[1:], strict=False))
    a, b = arl.fit(counts, steps)
    assert 0.3 < b < 0.8  # ARL0 multiplied by 1.35-2.2 a unit of threshold
    needed = (math.log(1e6) - a) / b
    assert needed - 1.0 <= use.settings.threshold


def test_the_chaos_cusum_threshold_buys_its_budget_on_gaussian_noise() -> None:
    """The reward chaos CUSUM on the check itself fed a flat reward with Gaussian noise: its
    configured threshold is at least the one that buys an ARL0 of 10^6 steps (a shorter
    simulation than benchmarks/trend_arl.py's, allowed one unit of slack)."""
    arl = _trend_arl()
    steps = 60_000
    counts = arl.chaos_crossings(steps, seed=1)
    a, b = arl.fit(counts, steps)
    assert 0.3 < b < 0.9
    needed = (math.log(1e6) - a) / b
    assert needed - 1.0 <= _E.reward.chaos_cusum_threshold


# -- the reward: a fall from the peak in the unit of its wander ------------------------------


def _reward_findings(values: list[float]) -> list[Finding]:
    check = RewardCheck("train_reward", "critic/score/mean", _E.reward)
    return [f for step, x in enumerate(values) for f in check.update(step, x)]


def test_a_wandering_flat_reward_is_no_collapse() -> None:
    """A flat reward whose noise wanders in runs of one sign (AR(1), phi 0.6 and 0.8, sd
    0.1): its smoothed peak stands well above its level, and the fall from it is judged in the
    unit of that wander, not of one step's noise (before, every run at phi 0.8 was called a
    collapse)."""
    collapsed = {
        phi: sum(
            any(
                f.kind is Kind.REWARD_COLLAPSE
                for f in _reward_findings([0.5 + e for e in _ar1(1000, phi, 0.1, seed)])
            )
            for seed in range(20)
        )
        for phi in (0.6, 0.8)
    }
    assert collapsed[0.6] == 0 and collapsed[0.8] <= 4, collapsed


def test_a_real_fall_of_a_wandering_reward_is_a_collapse() -> None:
    """The same wander, then the reward falls by 0.4 (4 sds) over 20 steps and stays: found
    in every run, in half of them within 20 steps of the fall's end."""
    first = []
    for seed in range(10):
        noise = _ar1(620, 0.8, 0.1, seed)
        values = [0.5 - 0.02 * min(max(t - 500, 0), 20) + e for t, e in enumerate(noise)]
        found = _reward_findings(values)
        steps = [f.step for f in found if f.kind is Kind.REWARD_COLLAPSE and f.step >= 500]
        assert steps, seed
        first.append(steps[0])
    assert sorted(first)[5] <= 540, first
