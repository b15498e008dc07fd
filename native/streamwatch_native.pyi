from typing import Any

from streamwatch.checks.base import Results
from streamwatch.incidents import Finding

class Checks:
    """The checks of one series, compiled: ``judge`` as ``streamwatch.checks.PyChecks``."""

    def __init__(self, specs: list[tuple[str, str, str, Any, bool]]) -> None: ...
    def judge(self, step: int, x: float) -> Results: ...
    def __len__(self) -> int: ...

def process_solo(
    run: Any, series: dict[str, Any], step: int, src: str, metrics: dict[str, float]
) -> tuple[int, tuple[Any, list[tuple[tuple[Any, ...], list[Finding]]]] | None]: ...
