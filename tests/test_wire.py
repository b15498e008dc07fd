"""The fast wire decode reads exactly what the validating path reads.

Every message of a corpus (the recorded examples, the real verl runs, simulated runs with
faults, the service benchmark's events, and every malformed input the other tests and the
malformed-flood fault test send) is decoded twice, with and without the fast path: the
event (its type, its fields and their types), the problems and the rejection must be
the same. And the fast path must be the one that reads the well-formed events.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from streamwatch.events import Event
from streamwatch.simulate import Fault, RunSpec, simulate
from streamwatch.sources.kafka import Decoded, decode_message
from streamwatch.sources.wire import decode_plain

ROOT = Path(__file__).resolve().parent.parent
GOOD = {"run_id": "r", "step": 3, "metrics": {"loss": 1.0}}


def _lines(pattern: str) -> list[bytes]:
    return [
        line
        for path in sorted(ROOT.glob(pattern))
        for line in path.read_bytes().splitlines()
        if line.strip()
    ]


def _simulated() -> list[bytes]:
    faults = ["entropy_collapse", "nonfinite_metric", "rank_straggler", "reward_hacking"]
    specs = [
        RunSpec(f"wire-{n}", steps=60, hosts=1, ranks_per_host=2, seed=n, faults=(Fault(k, 30),))
        for n, k in enumerate(faults)
    ]
    return [json.dumps(e.to_json_dict()).encode() for e in simulate(specs)]


def _bench_shape() -> list[bytes]:
    """The service benchmark's events: 20 metrics at full float precision, a float ts."""
    rng = random.Random(0)
    out = []
    for n in range(200):
        metrics = {f"custom/metric_{i:02d}": rng.gauss(1.0, 0.02) for i in range(20)}
        body = {"run_id": f"bench-{n % 7}", "step": n, "ts": 1.7e9 + n, "metrics": metrics}
        out.append(json.dumps(body).encode())
    return out


def _variant(**change: Any) -> bytes:
    body = {**GOOD, **change}
    return json.dumps({k: v for k, v in body.items() if v is not _DROP}).encode()


_DROP = object()

#: well-formed events of every shape the contract allows
SHAPES = [
    _variant(),
    _variant(ts=1_764_460_800.25),
    _variant(ts=1_764_460_800),  # an integral ts
    _variant(ts=None),
    _variant(source={"host": "node-3", "rank": 5}),
    _variant(source={"host": "node-3"}),
    _variant(source={"rank": 0}),
    _variant(source={}),
    _variant(source={"host": None, "rank": None}),
    _variant(source={"host": "h", "rank": 1, "pid": 7}),  # extra keys are ignored
    _variant(source=None),
    _variant(tags={"exp": "clip-higher"}),
    _variant(tags={}),
    _variant(metrics={"loss": 1, "count": 3}),  # integers are numbers
    _variant(metrics={"big": 2**60, "neg": -(2**62)}),
    _variant(metrics={"tiny": 5e-324, "huge": 1.7e308, "neg0": -0.0}),
    _variant(step=0),
    _variant(step=2**53),
    _variant(run_id="x" * 512),
    _variant(run_id="é ü 日本"),
    _variant(extra="ignored", more=[1, 2]),
    b'{"run_id": "r", "step": 1, "step": 2, "metrics": {"a": 1.0, "a": 2.0}}',
    b' \n{"run_id":"r","step":1,"metrics":{"a":1.0}}\n ',
]

#: every malformed input the other tests send, and the flood's kinds, and the edges
BAD = [
    None,
    b"",
    b'{"run_id": "ok", "step": ',
    json.dumps(GOOD).encode()[:-9],
    b"[1, 2, 3]",
    b'"text"',
    b"null",
    b"17",
    b'{"run_id": "ok", "step": 4}',
    b'{"run_id": "r", "step": true, "metrics": {"loss": 1.0}}',
    b'{"run_id": "r", "step": false, "metrics": {"loss": 1.0}}',
    b'{"run_id": "r", "step": 3.0, "metrics": {"loss": 1.0}}',
    b'{"run_id": "r", "step": 3.5, "metrics": {"loss": 1.0}}',
    b'{"run_id": "r", "step": "3", "metrics": {"loss": 1.0}}',
    b'{"run_id": "r", "step": -1, "metrics": {"loss": 1.0}}',
    _variant(step=2**53 + 1),
    _variant(step=2**70),
    _variant(step=None),
    _variant(step=_DROP),
    _variant(run_id=""),
    _variant(run_id="x" * 513),
    _variant(run_id=7),
    _variant(run_id=None),
    _variant(run_id=_DROP),
    _variant(metrics={}),
    _variant(metrics=[1.0]),
    _variant(metrics=None),
    _variant(metrics="loss"),
    _variant(metrics=_DROP),
    _variant(metrics={"": 1.0}),
    _variant(metrics={"": 1.0, "loss": 2.0}),
    _variant(metrics={"loss": "nan", "x": "a"}),
    _variant(metrics={"loss": "1.5"}),
    _variant(metrics={"loss": " -Infinity "}),
    _variant(metrics={"loss": None}),
    _variant(metrics={"loss": True}),
    _variant(metrics={"loss": [1.0]}),
    _variant(metrics={"loss": {"v": 1.0}}),
    _variant(metrics={"loss": 10**400}),
    b'{"run_id": "r", "step": 1, "metrics": {"loss": NaN}}',
    b'{"run_id": "r", "step": 1, "metrics": {"loss": Infinity, "x": -Infinity}}',
    b'{"run_id": "r", "step": 1, "metrics": {"loss": 1e999}}',
    _variant(ts="abc"),
    _variant(ts="1764460800"),
    _variant(ts=True),
    _variant(ts=[1.0]),
    _variant(ts=10**400),
    b'{"run_id": "r", "step": 1, "ts": NaN, "metrics": {"loss": 1.0}}',
    b'{"run_id": "r", "step": 1, "ts": Infinity, "metrics": {"loss": 1.0}}',
    b'{"run_id": "r", "step": 1, "ts": 1e999, "metrics": {"loss": 1.0}}',
    _variant(source={"host": "h", "rank": True}),
    _variant(source={"host": "h", "rank": "3"}),
    _variant(source={"host": "h", "rank": 3.0}),
    _variant(source={"host": 5}),
    _variant(source="node-3"),
    _variant(source=[1]),
    _variant(tags={"exp": 1}),
    _variant(tags={"exp": None}),
    _variant(tags=None),
    _variant(tags=["a"]),
    _variant(metrics=_DROP, name="loss", value=0.5),
    _variant(metrics=_DROP, name="loss", value="nan"),
    _variant(metrics=_DROP, name="loss"),
    json.dumps({**GOOD, "pad": "x" * 8192}).encode(),
    b'{"run_id": "r", "step": 1, "metrics": {"loss": 1.0}',
    b'{"run_id": "r\xff", "step": 1, "metrics": {"loss": 1.0}}',
    b'{"run_id": "r\\ud800", "step": 1, "metrics": {"loss": 1.0}}',
    b'\xef\xbb\xbf{"run_id": "r", "step": 1, "metrics": {"loss": 1.0}}',
    b"[" * 100_000 + b"]" * 100_000,
]


def _corpus() -> list[bytes | None]:
    return [
        *SHAPES,
        *BAD,
        *_lines("examples/logs/*.jsonl"),
        *_lines("tests/data/real/*.jsonl"),
        *_simulated(),
        *_bench_shape(),
    ]


def _event_facts(event: Event | None) -> object:
    """Everything about an event that code can see: its type, its fields with their types
    (NaN as text, so that it compares equal), the same for its source."""
    if event is None:
        return None

    def typed(value: object) -> object:
        if isinstance(value, float):
            return ("float", repr(value))
        if isinstance(value, dict):
            return {k: typed(v) for k, v in value.items()}
        return (type(value).__name__, value)

    fields = {name: typed(getattr(event, name)) for name in Event.__struct_fields__}
    source = event.source
    fields["source"] = None if source is None else (type(source), source.host, source.rank)
    return type(event), fields


def _facts(decoded: Decoded) -> object:
    return (_event_facts(decoded.event), decoded.problems, decoded.rejected)


@pytest.mark.parametrize("max_bytes", [1_048_576, 4096])
def test_the_fast_path_decodes_exactly_as_the_validating_path(max_bytes: int) -> None:
    corpus = _corpus()
    assert len(corpus) > 3000
    for value in corpus:
        fast = decode_message(value, "t/0@1", max_bytes=max_bytes)
        slow = decode_message(value, "t/0@1", max_bytes=max_bytes, fast=False)
        assert _facts(fast) == _facts(slow), value[:300] if value else value


def test_every_rejection_reason_and_count_is_the_same_on_the_malformed_flood() -> None:
    """The kinds of ``benchmarks/faults_kafka.py``'s flood (a line cut short, an array, a
    boolean step, no metrics, an oversized message) among good events, counted by reason."""

    def counts(fast: bool) -> Counter[str]:
        got: Counter[str] = Counter()
        for n in range(5_000):
            good = {"run_id": f"flood-{n % 7}", "step": n, "metrics": {"loss": 1.0}}
            value = [
                json.dumps(good).encode()[:-9],
                b"[1, 2, 3]",
                json.dumps({**good, "step": True}).encode(),
                json.dumps({"run_id": "flood-x", "step": n}).encode(),
                json.dumps({**good, "pad": "x" * 8192}).encode(),
                json.dumps(good).encode(),
            ][n % 6]
            decoded = decode_message(value, f"t/0@{n}", max_bytes=4096, fast=fast)
            got[decoded.rejected.reason if decoded.rejected else "event"] += 1
        return got

    fast = counts(True)
    assert fast == counts(False)
    assert fast == {
        "not_json": 834,
        "not_an_object": 834,
        "invalid_event": 1666,
        "oversized": 833,
        "event": 833,
    }


def test_the_fast_path_reads_every_well_formed_event_of_the_common_shape() -> None:
    plain = [*SHAPES, *_lines("tests/data/real/*.jsonl"), *_bench_shape()]
    assert all(decode_plain(value) is not None for value in plain)
    event = decode_plain(b'{"run_id": "r", "step": 1, "ts": 5, "metrics": {"n": 3}}')
    assert event is not None and event.ts == 5.0 and type(event.ts) is float
    assert type(event.metrics["n"]) is float


def test_what_the_fast_path_leaves_is_read_or_explained_by_the_validating_path() -> None:
    nan = decode_message(b'{"run_id": "r", "step": 1, "metrics": {"loss": NaN}}', "t/0@2")
    assert nan.event is not None and math.isnan(nan.event.metrics["loss"])
    assert decode_plain(b'{"run_id": "r", "step": 1, "metrics": {"loss": NaN}}') is None
    word = decode_message(_variant(metrics={"loss": "nan", "x": "a"}), "t/0@3")
    assert word.event is not None and [p.reason for p in word.problems] == [
        "metric 'x' value 'a' is not a number"
    ]
    empty = decode_message(_variant(metrics={"": 1.0}), "t/0@4")
    assert empty.rejected is not None and empty.rejected.detail == "metric with an empty name"


#: values a field of a malformed event may hold instead of its own
_ODD_VALUES: list[object] = [
    None, True, False, 0, -1, 1, 3.0, 3.5, -0.0, 2**53, 2**53 + 1, 2**64, 1e308, -1e308,
    "", "x", "3", "nan", "-inf", " 1.5 ", [], [1.0], {}, {"": 1.0}, {"a": "b"}, {"a": None},
    {"a": True}, {"a": 1, "": 2}, {"host": 5}, {"rank": "1"}, {"host": "h", "rank": 2},
    "x" * 513, "é", {"a": {"b": 1}},
]  # fmt: skip
_FIELDS = ["run_id", "step", "ts", "metrics", "source", "tags", "name", "value", "other"]
_BYTES = b'{}[]",:0123456789eE.-+ ntfruaNIy\\\xff'
#: number tokens JSON writers emit that not every reader takes the same way
_TOKENS = [b"1e999", b"-1e999", b"NaN", b"-Infinity", b"1e-999", b"1E400", b"-0", b"1.0e5"]
_HOLE = "<token>"


def _malformed(rng: random.Random, base: dict[str, Any]) -> bytes:
    """One random change to a well-formed event: a field given an odd value, dropped, or
    the encoded bytes cut, or a byte changed, added or removed."""
    body = dict(base)
    how = rng.randrange(7)
    if how == 6:  # a raw token in place of a field's or a metric's value
        if rng.random() < 0.5 and isinstance(body.get("metrics"), dict):
            body["metrics"] = {**body["metrics"], rng.choice([*body["metrics"], "m"]): _HOLE}
        else:
            body[rng.choice(_FIELDS)] = _HOLE
        token = rng.choice(_TOKENS)
        return json.dumps(body).encode().replace(json.dumps(_HOLE).encode(), token)
    if how == 0:
        body[rng.choice(_FIELDS)] = rng.choice(_ODD_VALUES)
    elif how == 1:
        body.pop(rng.choice(_FIELDS), None)
    elif how == 2 and isinstance(body.get("metrics"), dict) and body["metrics"]:
        metrics = dict(body["metrics"])
        metrics[rng.choice([*metrics, "", "new"])] = rng.choice(_ODD_VALUES)
        body["metrics"] = metrics
    raw = bytearray(json.dumps(body).encode())
    at = rng.randrange(len(raw) + 1)
    if how == 3:
        del raw[at:]
    elif how == 4:
        raw[at:at] = bytes([rng.choice(_BYTES)])
    elif how == 5 and at < len(raw):
        raw[at] = rng.choice(_BYTES)
    return bytes(raw)


def test_the_fast_path_agrees_with_the_validating_path_on_random_malformed_input() -> None:
    """A property over 7,000 seeded random changes to well-formed events of every shape:
    whatever the fast path reads, sets aside or leaves, the result is the validating path's
    (and both paths do set aside some and read some)."""
    rng = random.Random(20_261_204)
    bases = [json.loads(value) for value in [*SHAPES, *_bench_shape()[:20]]]
    outcomes: Counter[str] = Counter()
    for _ in range(7_000):
        value = _malformed(rng, rng.choice(bases))
        fast = decode_message(value, "t/0@9")
        slow = decode_message(value, "t/0@9", fast=False)
        assert _facts(fast) == _facts(slow), value[:300]
        outcomes[fast.rejected.reason if fast.rejected else "event"] += 1
    assert outcomes["event"] > 1000 and outcomes["invalid_event"] > 500
    assert outcomes["not_json"] > 500


def test_a_dead_letter_names_the_contract_s_parts_as_the_contract_does() -> None:
    """What a producer reads in a dead letter's reason: ``source``, not a class of ours."""
    decoded = decode_message(_variant(source="node-3"), "t/0@5")
    assert decoded.rejected is not None
    assert decoded.rejected.detail == (
        "source: input should be a valid dictionary or instance of source (got 'node-3')"
    )
