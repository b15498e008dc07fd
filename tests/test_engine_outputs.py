"""The engine's incidents on fixed inputs equal the saved ones (tests/data/expected).

The saved outputs were written by ``python tests/engine_outputs.py tests/data/expected``;
a change that alters detection on purpose rewrites them in the same commit, so that the
difference shows in review. The updates must come step by step as saved; within one step
their order is free (an event's generic metrics are screened after its RL checks).

Floats are equal within a relative 1e-9. numpy's kernels differ between CPUs in the last
bits: on an AVX-512 machine 126 of the saved floats came out different, by at most a
relative 5.1e-14 (NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL AVX512_SPR" against the
default); 1e-9 is four orders above that and far below any change of detection, whose
evidence moves in the third digit or earlier.
"""

from __future__ import annotations

import json
import math
from itertools import groupby
from pathlib import Path
from typing import Any

import pytest
from engine_outputs import cases

EXPECTED = Path(__file__).parent / "data" / "expected"
CASES = list(cases())
REL_TOL = 1e-9


def test_every_saved_output_has_its_input() -> None:
    names = {name.replace("/", "__") + ".jsonl" for name, _ in CASES}
    assert {p.name for p in EXPECTED.glob("*.jsonl")} == names


@pytest.mark.parametrize(("name", "found"), CASES, ids=[name for name, _ in CASES])
def test_incidents_equal_the_saved_ones(name: str, found: list[str]) -> None:
    saved = (EXPECTED / (name.replace("/", "__") + ".jsonl")).read_text().splitlines()
    got, want = by_step(found), by_step(saved)
    assert [step for step, _ in got] == [step for step, _ in want]
    for (step, a), (_, b) in zip(got, want, strict=True):
        assert close(a, b), f"step {step}:\n found {a}\n saved {b}"


def test_the_tolerance_sees_a_change_in_the_ninth_digit() -> None:
    assert close({"v": 1.7149169594261342}, {"v": 1.7149169594261344})
    assert not close({"v": 1.714916959}, {"v": 1.714916969})
    assert not close({"v": 1.0, "w": 2}, {"v": 1.0, "w": 3})


def by_step(lines: list[str]) -> list[tuple[int, list[Any]]]:
    """Consecutive updates of one step, sorted by their fields with floats rounded."""
    return [
        (step, sorted((json.loads(s) for s in group), key=lambda d: json.dumps(rounded(d))))
        for step, group in groupby(lines, key=lambda s: json.loads(s)["step"])
    ]


def rounded(x: Any) -> Any:
    if isinstance(x, float):
        return float(f"{x:.6g}")
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in sorted(x.items())}
    if isinstance(x, list):
        return [rounded(v) for v in x]
    return x


def close(a: Any, b: Any) -> bool:
    """Equal, but floats only within REL_TOL of each other."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=REL_TOL)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(p, q) for p, q in zip(a, b, strict=True))
    return bool(type(a) is type(b) and a == b)
