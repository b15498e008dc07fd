from typing import Any

from streamwatch.checks.base import Results, SeriesChecks
from streamwatch.checks.straggler import StragglerCheck
from streamwatch.config import HackingSettings, StallSettings
from streamwatch.incidents import Finding, Kind
from streamwatch.indicators import Indicator

class Checks:
    """The checks of one series, compiled: ``judge`` as ``streamwatch.checks.PyChecks``."""

    def __init__(self, specs: list[tuple[str, str, str, Any, bool]]) -> None: ...
    def judge(self, step: int, x: float) -> Results: ...
    def quiet(self, step: int, x: float) -> Results | None: ...
    def __len__(self) -> int: ...

class HackingCheck:
    """``streamwatch.checks.HackingCheck``, compiled: train reward rising while held-out
    reward falls."""

    def __init__(self, settings: HackingSettings) -> None: ...
    @property
    def kinds(self) -> tuple[Kind, ...]: ...
    def train(self, x: float) -> None: ...
    def heldout(self, step: int, metric: str, y: float) -> list[Finding]: ...

class StallCheck:
    """``streamwatch.checks.StallCheck``, compiled: no events for several times the run's own
    cadence."""

    ended: bool

    def __init__(self, settings: StallSettings) -> None: ...
    @property
    def kinds(self) -> tuple[Kind, ...]: ...
    @property
    def last_ts(self) -> float: ...
    @property
    def last_step(self) -> int: ...
    def observe(self, step: int, ts: float | None) -> Finding | None: ...
    def cadence(self) -> float: ...
    def check(self, now: float, heard: float | None = None) -> Finding | None: ...

class Series:
    """``streamwatch.run.PySeries``, compiled: the same attributes."""

    metric: str
    name: str
    indicator: Indicator | None
    checks: SeriesChecks
    straggler: StragglerCheck | None
    feeds_hacking: bool
    per_source: bool
    special: bool
    last_step: dict[str, int]
    pending_step: int
    pending_sum: float
    pending_n: int
    pending_k: int
    pending_values: list[tuple[str, float]]
    expected: int
    closed: bool
    solo: str | None

    def __init__(
        self,
        metric: str,
        name: str,
        indicator: Indicator | None,
        checks: SeriesChecks,
        straggler: StragglerCheck | None,
        feeds_hacking: bool,
    ) -> None: ...

def process_solo(
    run: Any, series: dict[str, Any], step: int, src: str, metrics: dict[str, float]
) -> tuple[int, tuple[Series, Results] | None]: ...

class Routes:
    """What each run's last event named, with the series (``process_records``)."""

    def __len__(self) -> int: ...

def process_records(
    monitor: Any,
    routes: Routes,
    records: list[Any],
    start: int,
    max_bytes: int,
    skip_below: dict[str, int],
    partition: int,
    run_partition: dict[str, int],
    heard: dict[str, float],
    received: float,
    dirty: set[str],
) -> tuple[int, int, int, tuple[Any, ...] | None]: ...
def _plain_event(
    value: bytes,
) -> tuple[str, int, float | None, str, list[tuple[str, float]], bool] | None: ...
