"""The engine's incidents on fixed inputs equal the saved ones (tests/data/expected).

The saved outputs were written by ``python tests/engine_outputs.py tests/data/expected``;
a change that alters detection on purpose rewrites them in the same commit, so that the
difference shows in review. The updates must come step by step as saved; within one step
their order is free (an event's generic metrics are screened after its RL checks).
"""

from __future__ import annotations

import json
from itertools import groupby
from pathlib import Path

import pytest
from engine_outputs import cases

EXPECTED = Path(__file__).parent / "data" / "expected"
CASES = list(cases())


def test_every_saved_output_has_its_input() -> None:
    names = {name.replace("/", "__") + ".jsonl" for name, _ in CASES}
    assert {p.name for p in EXPECTED.glob("*.jsonl")} == names


@pytest.mark.parametrize(("name", "found"), CASES, ids=[name for name, _ in CASES])
def test_incidents_equal_the_saved_ones(name: str, found: list[str]) -> None:
    saved = (EXPECTED / (name.replace("/", "__") + ".jsonl")).read_text().splitlines()
    assert by_step(found) == by_step(saved)


def by_step(lines: list[str]) -> list[tuple[int, list[str]]]:
    """Consecutive updates of one step, as a sorted group."""
    return [
        (step, sorted(group)) for step, group in groupby(lines, key=lambda s: json.loads(s)["step"])
    ]
