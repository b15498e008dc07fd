"""Silences: matchers (run glob, kind, indicator glob) that mute incidents until they expire.

Kept in a JSON file (``{"version": 1, "silences": [...]}``) that the CLI edits
(``streamwatch silence add|list|expire``) and a running dispatcher re-reads when it changes.

>>> from streamwatch.incidents import Incident
>>> s = Silence(id="3f2a", run_id="grpo-*", kind="entropy_collapse", starts_at=0, expires_at=60)
>>> inc = Incident(id="a1", run_id="grpo-7", kind="entropy_collapse", severity="warning",
...     status="firing", indicator="entropy", metric="actor/entropy", step=812, message="")
>>> silenced_by(inc, [s], now=30.0).id
'3f2a'
>>> silenced_by(inc, [s], now=60.0) is None  # expired
True
>>> parse_duration("1h30m")
5400.0
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import uuid
from collections.abc import Iterable, Iterator
from fnmatch import fnmatchcase
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from streamwatch.incidents import KINDS, Incident

__all__ = [
    "Silence",
    "SilenceFile",
    "add_silence",
    "expire_silence",
    "parse_duration",
    "read_silences",
    "silenced_by",
]

log = logging.getLogger(__name__)
_VERSION = 1


class Silence(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    run_id: str = Field("*", description="glob")
    kind: str | None = None
    indicator: str = Field("*", description="glob")
    starts_at: float
    expires_at: float
    comment: str = ""
    created_by: str = ""

    @model_validator(mode="after")
    def _valid(self) -> Silence:
        if self.kind is not None and self.kind not in KINDS:
            raise ValueError(f"unknown kind {self.kind!r}; known: {list(KINDS)}")
        if self.expires_at <= self.starts_at:
            raise ValueError("a silence must expire after it starts")
        return self

    def matches(self, inc: Incident) -> bool:
        return (
            fnmatchcase(inc.run_id, self.run_id)
            and (self.kind is None or inc.kind == self.kind)
            and fnmatchcase(inc.indicator, self.indicator)
        )

    def active(self, now: float) -> bool:
        return self.starts_at <= now < self.expires_at

    def describe(self) -> str:
        kind = self.kind or "*"
        return f"run_id={self.run_id} kind={kind} indicator={self.indicator}"


def silenced_by(inc: Incident, silences: Iterable[Silence], now: float) -> Silence | None:
    """The first active silence matching the incident, or None."""
    for s in silences:
        if s.active(now) and s.matches(inc):
            return s
    return None


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def parse_duration(text: str) -> float:
    """Seconds from ``90s``, ``30m``, ``2h``, ``1d``, ``1w``, ``1h30m``. A bare number is
    refused: ``2`` might be meant as hours as well as seconds.

    >>> parse_duration("2")
    Traceback (most recent call last):
    ...
    ValueError: duration '2' has no unit: write 2s, 2m, 2h, 2d or 2w
    """
    t = text.strip().lower()
    if _NUMBER.fullmatch(t):
        raise ValueError(f"duration {text!r} has no unit: write {t}s, {t}m, {t}h, {t}d or {t}w")
    parts = _DURATION.findall(t)
    if not parts or "".join(n + u for n, u in parts) != t:
        raise ValueError(f"duration {text!r}: expected e.g. 90s, 30m, 2h, 1d or 1h30m")
    return sum(float(n) * _UNITS[u] for n, u in parts)


# -- the file -----------------------------------------------------------------------------


def read_silences(path: Path) -> list[Silence]:
    """All silences in the file (expired ones included); a missing file has none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    try:
        data = json.loads(text)
        return [Silence.model_validate(s) for s in data.get("silences", [])]
    except (json.JSONDecodeError, AttributeError, ValidationError) as exc:
        raise ValueError(f"{path}: not a silences file: {exc}") from exc


def _write_silences(path: Path, silences: list[Silence]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    body = {"version": _VERSION, "silences": [s.model_dump(mode="json") for s in silences]}
    with tmp.open("w", encoding="utf-8") as f:
        json.dump(body, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise writers (two CLI calls at once) with an advisory lock beside the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def add_silence(
    path: Path,
    *,
    now: float,
    duration: float,
    run_id: str = "*",
    kind: str | None = None,
    indicator: str = "*",
    comment: str = "",
    created_by: str = "",
    silence_id: str | None = None,
) -> Silence:
    if run_id == "*" and kind is None and indicator == "*":
        raise ValueError("a silence needs at least one matcher (--run, --kind or --indicator)")
    silence = Silence(
        id=silence_id or uuid.uuid4().hex[:8],
        run_id=run_id,
        kind=kind,
        indicator=indicator,
        starts_at=now,
        expires_at=now + duration,
        comment=comment,
        created_by=created_by,
    )
    with _locked(path):
        silences = read_silences(path)
        if any(s.id == silence.id for s in silences):
            raise ValueError(f"a silence with id {silence.id} exists already")
        _write_silences(path, [*silences, silence])
    return silence


def expire_silence(path: Path, silence_id: str, *, now: float) -> Silence:
    """End a silence now; ids may be given by a unique prefix."""
    with _locked(path):
        silences = read_silences(path)
        found = [s for s in silences if s.id.startswith(silence_id)]
        if len(found) != 1:
            what = "no silence" if not found else f"{len(found)} silences"
            raise ValueError(f"{what} with id {silence_id!r} in {path}")
        target = found[0]
        ended = target.model_copy(update={"expires_at": min(target.expires_at, now)})
        if ended.expires_at <= ended.starts_at:
            ended = ended.model_copy(update={"starts_at": ended.expires_at - 1e-3})
        _write_silences(path, [ended if s.id == target.id else s for s in silences])
    return ended


class SilenceFile:
    """The silences of a file, re-read whenever the file changes (checked at most every
    ``check_every`` seconds of the caller's clock). A broken file keeps the last good list."""

    def __init__(self, path: Path, check_every: float = 1.0) -> None:
        self.path = path
        self.check_every = check_every
        self._stamp: tuple[int, int] | None = None
        self._next_check = float("-inf")
        self._silences: list[Silence] = []

    def current(self, now: float) -> list[Silence]:
        if now >= self._next_check:
            self._next_check = now + self.check_every
            self._reload()
        return self._silences

    def _reload(self) -> None:
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            self._stamp, self._silences = None, []
            return
        if stamp == self._stamp:
            return
        try:
            self._silences = read_silences(self.path)
        except (ValueError, OSError) as exc:
            log.error("silences: keeping the previous %d: %s", len(self._silences), exc)
        self._stamp = stamp
