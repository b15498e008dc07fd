"""One conformance suite over every per-step health check and every detector.

Each check and detector, whatever it watches: no serious finding on a constant stream; the
same input gives the same output; a snapshot (pickle) at any step continues exactly as the
uninterrupted one; extreme values never raise; and in the engine, no non-finite value ever
reaches a check or the drift screen.
"""

from __future__ import annotations

import math
import pickle
import random
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from librt.vecs import vec

from streamwatch.checks import (
    Check,
    DriftColumn,
    EntropyCheck,
    LengthCheck,
    MismatchCheck,
    RewardCheck,
    SpikeCheck,
    TruncationCheck,
    screen,
)
from streamwatch.config import EngineConfig
from streamwatch.detectors import Ewma, Persistence, TrendBreak, Window
from streamwatch.engine.findings import Finding
from streamwatch.engine.monitor import Monitor
from streamwatch.events import Event, Source
from streamwatch.incidents import KINDS, Kind, Severity

_E = EngineConfig()


class Screened:
    """The drift screen of one metric, seen as a per-step check.

    A plain class, not a subclass of ``Check``: in the compiled build a snapshot of an
    interpreted subclass of a native class keeps only the native class's attributes.
    """

    kinds: tuple[Kind, ...] = DriftColumn.kinds

    def __init__(self, metric: str) -> None:
        self.column = DriftColumn(metric, metric, _E.drift)

    def update(self, step: int, x: float) -> list[Finding]:
        return screen(step, [self.column], vec[float]([x]))


def _noisy(n: int, level: float, sd: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [level + rng.gauss(0.0, sd) for _ in range(n)]


#: name -> (make the check, a constant healthy level, a stream that turns unhealthy at 150)
CASES: dict[str, tuple[Callable[[], Check | Screened], float, list[float]]] = {
    "entropy": (
        lambda: EntropyCheck("entropy", "actor/entropy", _E.entropy),
        0.4,
        _noisy(150, 0.4, 0.01, 1) + [0.4 * 0.8**k for k in range(1, 151)],
    ),
    "token_prob": (
        lambda: EntropyCheck("token_prob", "actor/mean_token_prob", _E.entropy, invert=True),
        0.8,
        _noisy(150, 0.8, 0.005, 2) + [1.0 - 0.2 * 0.8**k for k in range(1, 151)],
    ),
    "reward": (
        lambda: RewardCheck("train_reward", "critic/score/mean", _E.reward),
        0.6,
        _noisy(150, 0.6, 0.01, 3) + _noisy(150, 0.6, 0.15, 4),
    ),
    "length": (
        lambda: LengthCheck("response_length", "response_length/mean", _E.length),
        400.0,
        _noisy(150, 400.0, 4.0, 5) + [400.0 * 2 ** (k / 10) for k in range(1, 151)],
    ),
    "truncation": (
        lambda: TruncationCheck("truncation_ratio", "response_length/clip_ratio", _E.length),
        0.02,
        _noisy(150, 0.02, 0.002, 6) + [0.95] * 150,
    ),
    "spike": (
        lambda: SpikeCheck("grad_norm", "actor/grad_norm", _E.spike),
        0.3,
        _noisy(150, 0.3, 0.01, 7) + _noisy(150, 30.0, 1.0, 8),
    ),
    "mismatch": (
        lambda: MismatchCheck("prob_mismatch", "training/rollout_probs_diff_mean", _E.mismatch),
        0.02,
        _noisy(150, 0.02, 0.002, 13) + [0.02 * 1.05**k for k in range(1, 151)],
    ),
    "drift": (
        lambda: Screened("perf/mfu/actor"),
        0.3,
        _noisy(150, 0.3, 0.005, 9) + _noisy(150, 0.1, 0.005, 10),
    ),
}
CHECKS = sorted(CASES)


def feed(check: Check | Screened, values: Iterable[float], start: int = 0) -> list[Finding]:
    out: list[Finding] = []
    for step, x in enumerate(values, start=start):
        found = check.update(step, x)
        assert isinstance(found, list)
        out.extend(found)
    return out


def test_every_per_step_check_class_is_covered() -> None:
    classes = {type(make()) for make, _, _ in CASES.values()}
    assert classes == {
        Screened,
        EntropyCheck,
        LengthCheck,
        MismatchCheck,
        RewardCheck,
        SpikeCheck,
        TruncationCheck,
    }


@pytest.mark.parametrize("name", CHECKS)
def test_check_is_quiet_on_a_constant_stream(name: str) -> None:
    make, level, _ = CASES[name]
    found = feed(make(), [level] * 300)
    serious = [f for f in found if f.severity is not Severity.INFO]
    assert not serious, [f"{f.step} {f.kind} {f.severity}: {f.message}" for f in serious[:3]]


@pytest.mark.parametrize("name", CHECKS)
def test_check_finds_the_unhealthy_part_of_its_stream(name: str) -> None:
    make, _, stream = CASES[name]
    check = make()
    found = feed(check, stream)
    assert found, f"{name}: the stream's unhealthy part raised nothing"
    assert all(f.kind in check.kinds for f in found)
    assert min(f.step for f in found) >= 150, [f"{f.step}: {f.message}" for f in found[:3]]


@pytest.mark.parametrize("name", CHECKS)
def test_same_input_same_output(name: str) -> None:
    make, _, stream = CASES[name]
    assert repr(feed(make(), stream)) == repr(feed(make(), stream))


@pytest.mark.parametrize("name", CHECKS)
@pytest.mark.parametrize("cut", [1, 40, 150, 160, 220])
def test_check_survives_a_snapshot_at_any_step(name: str, cut: int) -> None:
    make, _, stream = CASES[name]
    check = make()
    feed(check, stream[:cut])
    copy = pickle.loads(pickle.dumps(check))
    rest = stream[cut:]
    expected = feed(check, rest, start=cut)
    got = feed(copy, rest, start=cut)
    assert repr(got) == repr(expected)


@pytest.mark.parametrize("name", CHECKS)
@pytest.mark.parametrize(
    "values",
    [
        [1e300] * 300,
        [0.0] * 300,
        [0.0, 1e300] * 150,
        [0.5] * 100 + [1e300] * 100 + [0.0] * 100,
        [-1e300, 1e300] * 150,
    ],
    ids=["huge", "zeros", "alternating", "level-huge-zero", "signed-huge"],
)
def test_check_never_raises_on_extreme_values(name: str, values: list[float]) -> None:
    make, _, _ = CASES[name]
    for finding in feed(make(), values):
        assert finding.kind.value in KINDS
        assert finding.message


# -- detectors -----------------------------------------------------------------------------

#: name -> (make, feed one value and give the signal)
DETECTORS: dict[str, tuple[Callable[[], Any], Callable[[Any, float], object]]] = {
    "window": (lambda: Window(20), lambda d, x: (d.update(x), d.median_and_sd())[1]),
    "ewma": (lambda: Ewma(0.3), lambda d, x: d.update(x)),
    "persistence": (lambda: Persistence(3), lambda d, x: d.update(x > 1.0)),
    "trend_break": (
        lambda: TrendBreak("up", lag=5, span=10, settle=10, threshold=6.0),
        lambda d, x: (d.update(x), d.statistic),
    ),
}
STEP_STREAM = _noisy(100, 0.0, 0.3, 11) + _noisy(100, 3.0, 0.3, 12)


def signals(name: str, values: Iterable[float], detector: Any = None) -> list[str]:
    make, update = DETECTORS[name]
    d = make() if detector is None else detector
    return [repr(update(d, x)) for x in values]


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_detector_is_steady_on_a_constant_stream(name: str) -> None:
    out = signals(name, [0.5] * 200)
    assert len(set(out[50:])) == 1, out[50:55]


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_detector_moves_on_a_step_change(name: str) -> None:
    out = signals(name, STEP_STREAM)
    assert any(o != out[99] for o in out[100:120]), out[95:105]


@pytest.mark.parametrize("name", sorted(DETECTORS))
def test_detector_ignores_non_finite_values(name: str) -> None:
    make, update = DETECTORS[name]
    d = make()
    clean = signals(name, STEP_STREAM)
    dirty = []
    for i, x in enumerate(STEP_STREAM):
        if name != "persistence" and i % 7 == 3:  # persistence reads conditions, not values
            update(d, math.nan)
            update(d, math.inf)
        dirty.append(repr(update(d, x)))
    assert dirty == clean


@pytest.mark.parametrize("name", sorted(DETECTORS))
@pytest.mark.parametrize("cut", [1, 99, 150])
def test_detector_survives_a_snapshot_at_any_step(name: str, cut: int) -> None:
    make, _ = DETECTORS[name]
    d = make()
    signals(name, STEP_STREAM[:cut], d)
    copy = pickle.loads(pickle.dumps(d))
    assert signals(name, STEP_STREAM[cut:], copy) == signals(name, STEP_STREAM[cut:], d)


# -- the engine: no non-finite value reaches a check -----------------------------------------


def test_no_nonfinite_value_reaches_a_check_or_the_screen() -> None:
    """A run whose values are sometimes NaN or infinite is judged exactly as the same run with
    those values left out: beyond the non-finite incident itself, they change nothing (so
    none reached a check, a detector or the generic screen)."""
    rng = random.Random(3)
    names = ["actor/entropy", "critic/score/mean", "response_length/mean", "actor/grad_norm"]
    names += [f"perf/custom_{i}" for i in range(6)]
    dirty, clean = Monitor(), Monitor()
    got: list[str] = []
    want: list[str] = []
    removed = 0
    for step in range(1, 200):
        for rank in range(2):
            metrics = {
                n: rng.choice([math.nan, math.inf, -math.inf, 1.0 + rng.random()])
                if rng.random() < 0.1
                else 1.0 + rng.random()
                for n in names
            }
            finite = {n: x for n, x in metrics.items() if math.isfinite(x)}
            removed += len(metrics) - len(finite)
            source = Source(host="node-0", rank=rank) if step % 3 else None
            run = f"r{step % 2}"
            for monitor, values, out in ((dirty, metrics, got), (clean, finite, want)):
                event = Event(run_id=run, step=step, metrics=values, source=source)
                out += [i.to_json() for i in monitor.process(event) if i.kind != "nonfinite_metric"]
    got += [i.to_json() for i in dirty.flush() if i.kind != "nonfinite_metric"]
    want += [i.to_json() for i in clean.flush() if i.kind != "nonfinite_metric"]
    assert removed > 200  # the stream did carry non-finite values (291)
    assert got == want
