"""The engine's incidents on fixed inputs equal the saved ones (tests/data/expected).

The saved outputs were written by ``python tests/engine_outputs.py tests/data/expected``;
a change that alters detection on purpose rewrites them in the same commit, so that the
difference shows in review.
"""

from __future__ import annotations

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
    assert found == saved
