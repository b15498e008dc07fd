"""The compiled core answers as the Python engine does: check by check, value by value, and
incident by incident over whole runs (simulated failures of every kind, the real runs)."""

from __future__ import annotations

import math
import pickle
import random
from collections import defaultdict
from pathlib import Path

import pytest
import streamwatch_native

from streamwatch.config import Config, EngineConfig
from streamwatch.events import Event
from streamwatch.incidents import KINDS, Incident
from streamwatch.indicators import Indicator, IndicatorMap
from streamwatch.monitor import Monitor
from streamwatch.sources.files import read_events
from streamwatch.run import check_specs, make_checks
from streamwatch.simulate import healthy_spec, random_fault_spec, simulate_run

REAL = sorted((Path(__file__).parent / "data" / "real").glob("*.jsonl"))
CFG = EngineConfig()
#: One series of each kind of check: (indicator, metric).
SERIES = {
    "DriftCheck": (None, "custom/metric"),
    "EntropyCheck": (Indicator.ENTROPY, "actor/entropy"),
    "EntropyCheck(invert)": (Indicator.TOKEN_PROB, "actor/token_prob"),
    "LengthCheck": (Indicator.RESPONSE_LENGTH, "response_length/mean"),
    "RewardCheck": (Indicator.TRAIN_REWARD, "critic/score/mean"),
    "SpikeCheck": (Indicator.GRAD_NORM, "actor/grad_norm"),
    "TruncationCheck": (Indicator.TRUNCATION_RATIO, "response_length/clip_ratio"),
}


def shapes(seed: int) -> list[list[float]]:
    """Awkward series: flat, zero, alternating, steps, spikes, huge and tiny values, drifts."""
    rng = random.Random(seed)
    n = 300
    walk = [0.0]
    for _ in range(n - 1):
        walk.append(walk[-1] + rng.gauss(0, 1))
    return [
        [1.0] * n,
        [0.0] * n,
        [(-1.0) ** i for i in range(n)],
        [0.5] * 100 + [5.0] * 200,
        [0.5 + 0.01 * rng.gauss(0, 1) + (50.0 if 150 <= i < 160 else 0.0) for i in range(n)],
        [1e300 * (1 + rng.random()) for _ in range(n)],
        [1e-300 * rng.random() for _ in range(n)],
        [-3.0 + 0.1 * rng.gauss(0, 1) for _ in range(n)],
        walk,
        [0.4 * math.exp(-i / 40) + 0.001 * rng.random() for i in range(n)],  # entropy collapse
        [400 * 1.02**i for i in range(n)],  # length explosion
        [0.02 + 0.9 * (i > 100) + 0.01 * rng.random() for i in range(n)],  # truncation
        [0.6 + 0.3 * (i > 120) * rng.gauss(0, 1) for i in range(n)],  # reward chaos
        [min(0.9, i / 100) - (0.8 if i > 200 else 0.0) for i in range(n)],  # reward collapse
    ]


def simulated_values() -> dict[str, list[list[float]]]:
    """Per kind of check, the finite values of matching series in simulated failing runs."""
    indicators = IndicatorMap()
    by_check: dict[str, list[list[float]]] = defaultdict(list)
    for i, kind in enumerate(KINDS):
        spec = random_fault_spec(kind, 1000 + i)
        values: dict[str, list[float]] = defaultdict(list)
        for event in simulate_run(spec):
            for metric, x in event.metrics.items():
                if math.isfinite(x):
                    values[metric].append(x)
        for metric, xs in values.items():
            indicator = indicators.resolve(metric)
            for key, (ind, _) in SERIES.items():
                generic = ind is None and indicator is None and "DriftCheck" in key
                if ind is not None and ind is indicator or generic:
                    by_check[key].append(xs)
    return by_check


SIMULATED = simulated_values()


def pair(key: str) -> tuple[object, object]:
    indicator, metric = SERIES[key]
    specs = check_specs(indicator, metric, CFG)
    name = indicator.value if indicator is not None else metric
    python = make_checks(specs, name, metric, compiled=False)
    compiled = make_checks(specs, name, metric, compiled=True)
    assert isinstance(compiled, streamwatch_native.Checks), f"{key} is not compiled"
    return python, compiled


@pytest.mark.parametrize("key", sorted(SERIES))
def test_a_compiled_check_finds_what_the_python_one_finds(key: str) -> None:
    series = [*shapes(0), *shapes(1), *SIMULATED[key]]
    assert len(series) > 28
    found = 0
    for xs in series:
        python, compiled = pair(key)
        for step, x in enumerate(xs):
            if step == len(xs) // 2:  # a snapshot mid-stream carries on where it was
                compiled = pickle.loads(pickle.dumps(compiled))
            expected = python.judge(step, x)  # type: ignore[attr-defined]
            got = compiled.judge(step, x)  # type: ignore[attr-defined]
            assert repr(got) == repr(expected), f"{key}, step {step}, value {x!r}"
            found += sum(len(f) for _, f in expected)
    assert found > 0, f"no {key} finding in any series: nothing was compared"


def incidents(events: list[Event], compiled: bool) -> tuple[list[str], Monitor]:
    monitor = Monitor(Config(), compiled=compiled)
    out: list[Incident] = []
    for event in events:
        out.extend(monitor.process(event))
    out.extend(monitor.flush())
    return [repr(i.model_dump()) for i in out], monitor


def compiled_share(monitor: Monitor) -> float:
    series = [s for run in monitor.runs.values() for s in run.series.values() if len(s.checks)]
    native = [s for s in series if isinstance(s.checks, streamwatch_native.Checks)]
    return len(native) / len(series)


@pytest.mark.parametrize("kind", ["healthy", *KINDS])
def test_the_compiled_engine_raises_the_same_incidents(kind: str) -> None:
    for seed in (0, 1, 2):
        spec = (
            healthy_spec(f"healthy-{seed}", seed)
            if kind == "healthy"
            else random_fault_spec(kind, seed)
        )
        events = list(simulate_run(spec))
        expected, _ = incidents(events, compiled=False)
        got, monitor = incidents(events, compiled=True)
        assert got == expected, f"{kind}, seed {seed}"
        assert compiled_share(monitor) == 1.0


def test_the_compiled_engine_raises_the_same_incidents_on_the_real_runs() -> None:
    assert REAL
    for path in REAL:
        events = list(read_events([path]))
        expected, _ = incidents(events, compiled=False)
        got, monitor = incidents(events, compiled=True)
        assert got == expected, path.name
        assert compiled_share(monitor) == 1.0
