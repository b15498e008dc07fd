"""The compiled core answers as the Python engine does: check by check, value by value, and
incident by incident over whole runs (simulated failures of every kind, the real runs)."""

from __future__ import annotations

import json
import math
import pickle
import random
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
import streamwatch_native

from streamwatch.checks import HackingCheck, StallCheck
from streamwatch.config import Config, EngineConfig, HackingSettings, StallSettings
from streamwatch.events import Event
from streamwatch.incidents import KINDS, Finding, Incident, Severity
from streamwatch.indicators import Indicator, IndicatorMap
from streamwatch.monitor import Monitor
from streamwatch.run import check_specs, make_checks
from streamwatch.simulate import healthy_spec, random_fault_spec, simulate_run
from streamwatch.sources.files import read_events

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
                if (ind is not None and ind is indicator) or generic:
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


#: One call of the hacking check: ("train", step, x) or ("heldout", step, y).
HackingCall = tuple[str, int, float]


def hacking_calls(seed: int) -> list[HackingCall]:
    """Train reward every step and a held-out evaluation every k steps: hacking (held-out
    falls while train rises), healthy, broken values, flat, tiny noise, no train at first."""
    rng = random.Random(seed)
    shape = seed % 8
    n = rng.randrange(150, 500)
    every = rng.choice([1, 2, 5, 10, 20])
    onset = rng.randrange(n // 4, 3 * n // 4)
    train_sd = rng.choice([0.0, 1e-9, 0.005, 0.02, 0.1])
    eval_sd = rng.choice([0.0, 1e-9, 0.005, 0.01, 0.05])
    fall = rng.choice([0.0005, 0.01, 0.05, 0.3, 1.0])
    calls: list[HackingCall] = []
    for step in range(n):
        rise = 0.2 + 0.6 * (1.0 - math.exp(-step / 120))
        x = rise + rng.gauss(0, train_sd)
        y = 0.5 * rise + rng.gauss(0, eval_sd)
        if shape in (0, 2, 5, 6) and step >= onset:  # hacking
            y -= fall * (step - onset) / 50 if shape != 6 else fall  # a decline, or a step
        if shape == 3:  # flat held-out, exactly linear train reward
            x, y = 0.5 + 0.001 * step, (0.4 if step < onset else 0.4 - fall)
        if shape == 4:  # tiny noise on a large level
            x, y = 1e6 + rise + 1e-9 * rng.random(), 1e6 + rise - (step > onset) * fall
        if shape == 2:  # broken values on both sides
            if rng.random() < 0.05:
                x = rng.choice([math.nan, math.inf, -math.inf])
            if rng.random() < 0.1:
                y = rng.choice([math.nan, math.inf, -math.inf])
        if shape == 5 and step < onset + 20:  # held-out evaluations before any train reward
            x = math.nan
        if shape == 7 and rng.random() < 0.02:  # healthy, with an occasional broken evaluation
            y -= 10.0
        calls.append(("train", step, x))
        if step % every == 0:
            calls.append(("heldout", step, y))
    return calls


def simulated_hacking_calls(spec_seed: int, kind: str) -> tuple[list[HackingCall], str]:
    """The train and held-out rewards of a simulated run, as the engine feeds them."""
    indicators = IndicatorMap()
    spec = (
        healthy_spec(f"healthy-{spec_seed}", spec_seed)
        if kind == "healthy"
        else random_fault_spec(kind, spec_seed)
    )
    calls: list[HackingCall] = []
    metric = ""
    for event in simulate_run(spec):
        for name, x in event.metrics.items():
            indicator = indicators.resolve(name)
            if indicator is Indicator.TRAIN_REWARD and math.isfinite(x):
                calls.append(("train", event.step, x))
            elif indicator is Indicator.HELDOUT_REWARD and math.isfinite(x):
                calls.append(("heldout", event.step, x))
                metric = name
    return calls, metric


def test_the_compiled_hacking_check_finds_what_the_python_one_finds() -> None:
    runs = [(hacking_calls(seed), "val/reward") for seed in range(40)]
    runs += [simulated_hacking_calls(seed, "reward_hacking") for seed in range(8)]
    runs += [simulated_hacking_calls(seed, "healthy") for seed in (0, 1)]
    runs += [simulated_hacking_calls(3, kind) for kind in ("reward_collapse", "reward_chaos")]
    found = 0
    heldouts = 0
    for calls, metric in runs:
        assert any(what == "heldout" for what, _, _ in calls), "no held-out evaluation"
        python = HackingCheck(HackingSettings())
        native = streamwatch_native.HackingCheck(HackingSettings())
        for i, (what, step, x) in enumerate(calls):
            if i == len(calls) // 2:  # a snapshot mid-stream carries on where it was
                native = pickle.loads(pickle.dumps(native))
            if what == "train":
                python.train(x)
                native.train(x)
                continue
            expected = python.heldout(step, metric, x)
            got = native.heldout(step, metric, x)
            assert repr(got) == repr(expected), f"{metric}, call {i}, step {step}, value {x!r}"
            heldouts += 1
            found += len(expected)
        assert native.kinds == python.kinds == HackingCheck.kinds
    assert heldouts > 1000
    assert found > 100, f"only {found} hacking findings: too little was compared"


#: One call of the stall check: ("observe", step, ts), ("check", now, heard) with heard
#: passed, ("check", now) without it, or ("end",): the engine sets ``ended``.
StallCall = (
    tuple[str, int, float | None] | tuple[str, float, float | None] | tuple[str, float] | tuple[str]
)


def stall_calls(seed: int) -> list[StallCall]:
    """A run's events and the engine's checks between them: steady cadences with jitter, long
    silences, clocks going backwards, missing and broken times, repeated and jumping steps,
    ends of input, and checks on the event clock and on a live service's own clock."""
    rng = random.Random(seed)
    shape = seed % 6
    cadence = rng.choice([0.2, 1.0, 7.5, 30.0, 120.0, 900.0])
    jitter = rng.choice([0.0, 0.01, 0.2, 0.6])
    limit = max(StallSettings().factor * cadence, StallSettings().min_seconds)
    t = rng.choice([0.0, 1.7e9, -500.0, 1e15])
    step = rng.choice([0, 1, 100])
    offset = rng.choice([0.0, -600.0, 37.5, 1e4])  # a live service's clock against the run's
    calls: list[StallCall] = []

    def check(now: float) -> None:
        how = rng.randrange(5)
        if how == 0:
            calls.append(("check", now))
        elif how == 1:
            calls.append(("check", now, None))
        elif how == 2:  # heard on the service's clock: its own now, when the last event came
            calls.append(("check", now + offset, t + offset))
        elif how == 3:
            calls.append(("check", now, rng.choice([math.nan, math.inf, -math.inf, t - limit])))
        else:
            calls.append(("check", rng.choice([math.nan, math.inf, -math.inf, now])))

    for _ in range(rng.randrange(80, 250)):
        if shape == 3:  # repeated steps, steps back, steps jumping
            step += rng.choice([0, 0, 1, 1, 1, 2, 7, 500, -3])
        elif rng.random() < 0.97:
            step += 1
        t += cadence * (1.0 + jitter * rng.uniform(-1.0, 1.0))
        if rng.random() < 0.06:  # a silence, checked while it lasts (or not)
            gap = cadence * rng.choice([2, 4, 6, 10, 20, 50]) + rng.choice([0.0, 30.0, 300.0])
            for _ in range(rng.randrange(0, 4)):
                check(t + gap * rng.random())
            t += gap
        ts: float | None = t
        if shape == 1 and rng.random() < 0.15:  # a clock going backwards
            ts = t - rng.choice([0.5, 5.0, 50.0]) * cadence - rng.choice([0.0, 100.0, 5000.0])
        if shape == 2 and rng.random() < 0.15:
            ts = rng.choice([None, math.nan, math.inf, -math.inf])
        calls.append(("observe", step, ts))
        if rng.random() < 0.15:
            check(t + rng.uniform(-cadence, 20.0 * cadence))
        if (shape == 4 and rng.random() < 0.06) or rng.random() < 0.01:
            calls.append(("end",))  # the input is over ... until the run's next event
            for _ in range(rng.randrange(0, 3)):
                check(t + limit * rng.choice([2.0, 10.0]))
    for k in (0.5, 1.05, 1.5, 2.5, 3.5, 10.0, 1e6):  # the silence after the last event
        check(t + k * limit)
    return calls


def special_stall_calls() -> list[list[StallCall]]:
    """Times at the ends of the float range: gaps that overflow, a cadence that underflows to
    zero (Python's division by it raises), a step advance that goes back in time."""
    huge = [("observe", i, (-1) ** i * 1.5e308) for i in range(6)]
    tiny = [("observe", 2 * i, i * 5e-324) for i in range(5)]
    back = [("observe", i, 1000.0 - 10.0 * i) for i in range(6)] + [("observe", 9, 2000.0)]
    out: list[list[StallCall]] = []
    for events in (huge, tiny, back):
        calls: list[StallCall] = list(events)
        calls += [("check", x) for x in (0.0, 59.0, 61.0, 1000.0, 1e300, math.inf, math.nan)]
        calls += [("check", 1e4, 0.0), ("check", 1e4, -math.inf)]
        out.append(calls)
    return out


def stall_call(check: StallCheck | streamwatch_native.StallCheck, call: StallCall) -> str:
    """Makes the call as the engine would; what it answered, or what it raised."""

    def answer(result: Callable[[], Finding | None]) -> str:
        try:
            return repr(result())
        except ArithmeticError as e:
            return f"{type(e).__name__}: {e}"

    match call:
        case ("observe", int(step), ts):
            assert ts is None or isinstance(ts, float)
            return answer(lambda: check.observe(step, ts))
        case ("check", float(now), heard):
            assert heard is None or isinstance(heard, float)
            return answer(lambda: check.check(now, heard))
        case ("check", float(now)):
            return answer(lambda: check.check(now))
        case ("end",):
            check.ended = True
            return "None"
    raise AssertionError(f"not a call: {call!r}")


def test_the_compiled_stall_check_finds_what_the_python_one_finds() -> None:
    runs = [stall_calls(seed) for seed in range(60)] + special_stall_calls()
    found: dict[Severity, int] = defaultdict(int)
    for r, calls in enumerate(runs):
        python = StallCheck(StallSettings())
        native = streamwatch_native.StallCheck(StallSettings())
        assert native.kinds == python.kinds == StallCheck.kinds
        for i, call in enumerate(calls):
            if i == len(calls) // 2:  # a snapshot mid-stream carries on where it was
                native = pickle.loads(pickle.dumps(native))
            where = f"run {r}, call {i}: {call!r}"
            expected = stall_call(python, call)
            got = stall_call(native, call)
            assert got == expected, where
            assert repr(native.cadence()) == repr(python.cadence()), where
            assert repr(native.last_ts) == repr(python.last_ts), where
            assert native.last_step == python.last_step, where
            assert native.ended is python.ended, where
            if expected.startswith("Finding("):
                found[Severity.CRITICAL if "CRITICAL" in expected else Severity.WARNING] += 1
    assert found[Severity.WARNING] > 20 and found[Severity.CRITICAL] > 20, dict(found)


def messages(seed: int) -> list[tuple[bytes, bool]]:
    """Plain events (True) and every near miss: wrong types, bounds, nulls, duplicates,
    escapes, non-finite tokens."""
    rng = random.Random(seed)
    out: list[tuple[bytes, bool]] = []
    numbers = ["1", "0", "-0", "-0.0", "1e5", "2.5E-3", "123456789012345678901234567890",
               "1e308", "4.9e-324", "-17", "0.1", "NaN", "Infinity", "1e999", "true", "null",
               '"1.5"', "[1]"]  # fmt: skip
    steps = ["0", "7", str(2**53), str(2**53 + 1), "-1", "5.0", '"5"', "true", "null"]
    run_ids = ['"r"', '"grpo-7b"', '"\\u00e9t\\u00e9"', '""', '"' + "x" * 512 + '"',
               '"' + "x" * 513 + '"', '"\\ud800"', "1", "null"]  # fmt: skip
    sources = [None, "{}", '{"host":"n1"}', '{"rank":3}', '{"host":"n1","rank":3,"x":[1]}',
               '{"rank":true}', '{"host":1}', "null", '"n1"']  # fmt: skip
    tags = [None, "{}", '{"exp":"a"}', '{"streamwatch.state":"finished"}', "null", '{"a":1}']
    for _ in range(400):
        n = rng.choice([0, 1, 3, 20])
        plain = rng.random() < 0.5  # half are events the fast path should take whole
        pick = (lambda xs: xs[0]) if plain else rng.choice
        names = [rng.choice(["loss", "a/b", "é", "", 'x\\"y', "custom/m"]) for _ in range(n)]
        if plain:
            names = [f"m{i}" for i in range(max(n, 1))]
        usual = [x for x in numbers[:10] if not x.startswith("-0")]
        vals = [rng.choice(usual) if plain else rng.choice(numbers) for _ in names]
        metrics = "{" + ",".join(f'"{k}":{v}' for k, v in zip(names, vals, strict=True)) + "}"
        fields = [f'"run_id":{pick(run_ids) if plain else rng.choice(run_ids)}',
                  f'"step":{steps[1] if plain else rng.choice(steps)}',
                  f'"metrics":{metrics}']  # fmt: skip
        if rng.random() < 0.5:
            times = ["1764460800.5", "5", "null", "-0", "NaN", "x"]
            fields.append(f'"ts":{pick(times) if plain else rng.choice(times)}')
        source, tag = rng.choice(sources[:5]) if plain else rng.choice(sources), rng.choice(tags)
        if plain and tag not in (None, "{}", '{"exp":"a"}'):
            tag = None
        if source is not None:
            fields.append(f'"source":{source}')
        if tag is not None:
            fields.append(f'"tags":{tag}')
        if rng.random() < 0.2:
            fields.append('"extra":{"deep":[1,{"a":null}]}')
        if not plain and rng.random() < 0.2:
            fields.append(rng.choice(fields))  # a key twice
        rng.shuffle(fields)
        text = "{" + ",".join(fields) + "}"
        if not plain and rng.random() < 0.1:
            text = rng.choice([text + "x", "[" + text + "]", text[:-1], " " + text + "\n"])
        out.append((text.encode(), plain))
    out.append((b'{"run_id":"r","step":1,"metrics":{"a":1}}\xff', False))
    return out


def test_the_compiled_reader_takes_what_the_python_one_reads_plainly() -> None:
    """A message the compiled loop reads gives the event ``decode_message`` gives; what it
    leaves is left to the careful path."""
    from streamwatch._json import loads
    from streamwatch.events import _decode_plain, is_finished, source_key

    taken = left = 0
    for seed in range(5):
        for raw, plain in messages(seed):
            fast = streamwatch_native._plain_event(raw)
            try:
                obj = loads(raw)
            except ValueError:
                obj = None
            event = _decode_plain(obj) if type(obj) is dict else None
            if fast is None:  # the careful path reads it (NaN, -0, ... or not an event)
                assert not plain, raw
                left += 1
                continue
            taken += 1
            assert event is not None, raw
            expected = (
                event.run_id,
                event.step,
                event.ts,
                source_key(event.source),
                list(event.metrics.items()),
                is_finished(event),
            )
            assert repr(fast) == repr(expected), raw
    assert taken > 800 and left > 800, (taken, left)


def simulated_messages() -> list[bytes]:
    """Two failing runs of 2 hosts x 2 ranks and a calm one of one rank, as messages."""
    from streamwatch.simulate import simulate

    specs = [random_fault_spec(kind, 7) for kind in ("entropy_collapse", "metric_spike")]
    specs.append(healthy_spec("calm", 3, hosts=1, ranks_per_host=1))
    return [json.dumps(e.to_json_dict()).encode() for e in simulate(specs)]


def by_events(monitor: Monitor, values: list[bytes]) -> list[Incident]:
    """``decode_message`` and ``Monitor.process``, message by message (a replay)."""
    from streamwatch.sources.kafka import decode_message

    out = []
    for v in values:
        event = decode_message(v, "t").event
        assert event is not None
        out += monitor.process(event, "t")
    return out


def by_batches(
    monitor: Monitor, values: list[bytes], routes: streamwatch_native.Routes
) -> tuple[list[Incident], int]:
    """The live service's way: ``process_records`` a batch at a time, what it leaves by
    ``Monitor.process``, what it begins by ``Monitor._values``. Also returns how many
    records the compiled loop took."""
    from collections import namedtuple

    from streamwatch.sources.kafka import decode_message

    record = namedtuple("record", "value offset")
    records = [record(v, i) for i, v in enumerate(values)]
    out: list[Incident] = []
    fast = 0
    for start in range(0, len(records), 100):
        batch, i = records[start : start + 100], 0
        while i < len(batch):
            i, n, _, rest = streamwatch_native.process_records(
                monitor, routes, batch, i, 1 << 20, {}, 0, {}, {}, 0.0, set()
            )
            fast += n
            if rest is not None:
                out += monitor.resume(rest, "t")
                continue
            if i < len(batch):
                event = decode_message(batch[i].value, "t").event
                assert event is not None
                out += monitor.process(event, "t")
                i += 1
    return out, fast


def restore_all(monitor: Monitor, into: Monitor) -> None:
    for run_id in list(monitor.runs):
        into.restore(monitor.snapshot(run_id, close=False))


def test_the_compiled_batch_loop_raises_what_the_event_loop_raises() -> None:
    """``process_records`` (the live service's common case) against decode + process, on
    failing runs with several ranks; midway each run is restored from its own snapshot (a
    hand-over within the process: its remembered series must not be used again)."""
    values = simulated_messages()
    half = len(values) // 200 * 100
    monitor = Monitor(sweep_seconds=math.inf)
    expected = by_events(monitor, values[:half])
    restore_all(monitor, monitor)
    expected += by_events(monitor, values[half:])

    monitor = Monitor(sweep_seconds=math.inf)
    routes = streamwatch_native.Routes()
    got, fast = by_batches(monitor, values[:half], routes)
    restore_all(monitor, monitor)
    more, fast2 = by_batches(monitor, values[half:], routes)
    assert [repr(u.model_dump()) for u in got + more] == [repr(u.model_dump()) for u in expected]
    assert any(u.kind == "entropy_collapse" for u in expected)
    took = fast + fast2
    assert took > len(values) // 2, f"the compiled loop took {took} of {len(values)} records"


def test_runs_restored_from_the_python_engine_go_on_in_python() -> None:
    """A compiled service that takes over runs checkpointed by a pure-Python one: their
    series are the Python engine's, which the compiled loop leaves to it."""
    values = simulated_messages()
    half = len(values) // 200 * 100
    python = Monitor(sweep_seconds=math.inf, compiled=False)
    expected = by_events(python, values[:half])
    compiled = Monitor(sweep_seconds=math.inf)
    restore_all(python, compiled)
    expected_rest = by_events(python, values[half:])
    got, _ = by_batches(compiled, values[half:], streamwatch_native.Routes())
    assert expected and expected_rest
    assert [repr(u.model_dump()) for u in got] == [repr(u.model_dump()) for u in expected_rest]
