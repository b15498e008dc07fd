"""Recorded files as a stream of events: streamwatch, verl and flat JSONL, HF
trainer_state.json, W&B CSV exports, console logs, TensorBoard event files and run directories.

Files are read as they are iterated, never whole (except a trainer_state.json, a single small
JSON document). Bad content never raises: each thing that cannot be read becomes a
:class:`~streamwatch.events.Problem` naming ``path:line`` and the reason, and the rest of
the file is still read.

>>> import tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "grpo-a.jsonl"
>>> lines = ['{"step": 1, "metrics": {"actor/entropy": 0.3}}', '{"step": 2, "metrics": 7}']
>>> _ = path.write_text("\\n".join(lines))
>>> source = FileSource(path)
>>> [(e.run_id, e.step, e.metrics) for e in source]
[('grpo-a', 1, {'actor/entropy': 0.3})]
>>> source.problems[0].origin.endswith("grpo-a.jsonl:2"), source.problems[0].reason
(True, "'metrics' must be an object, got 7")
>>> source.stats.events, source.stats.problems
(1, 1)
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from streamwatch.events import Event, Problem
from streamwatch.install import install_hint

from ._reading import ReadContext, ReadStats
from ._tensorboard import tensorboard_available
from .formats import FORMATS, READERS, detect_format

__all__ = [
    "MAX_KEPT_PROBLEMS",
    "FileSource",
    "ReadStats",
    "default_run_id",
    "expand_paths",
    "read_events",
]

#: Problems kept in :attr:`FileSource.problems` when no ``on_problem`` is given (all are counted).
MAX_KEPT_PROBLEMS = 10_000
_CHECKPOINT_PREFIX = "checkpoint-"
#: flat logs whose file name is the framework's, not the run's (prime-rl, ms-swift)
_GENERIC_STEMS = frozenset({"metrics", "logging"})


def default_run_id(path: Path, format: str) -> str:
    """The run id a file gives when its data names none.

    The file name without its extension (``runs/grpo-a.jsonl`` -> ``grpo-a``); for a file
    called ``trainer_state.json``, the training output directory
    (``out/sft-7b/checkpoint-500/trainer_state.json`` -> ``sft-7b``); for a TensorBoard event
    file, or a flat log named ``metrics.jsonl`` or ``logging.jsonl``, its directory
    (``tb/grpo-a/events.out.tfevents.1.host`` -> ``grpo-a``).
    """
    if format == "tensorboard" or (format == "flat" and path.stem in _GENERIC_STEMS):
        return path.absolute().parent.name or path.name
    if format == "hf" and path.name == "trainer_state.json":
        parent = path.absolute().parent
        if parent.name.startswith(_CHECKPOINT_PREFIX) and parent.parent.name:
            return parent.parent.name
        return parent.name or path.stem
    return path.stem or path.name


class FileSource:
    """One recorded file, read as events each time it is iterated.

    ``format`` is detected from the content unless given (one of :data:`FORMATS`);
    ``run_id`` overrides the run id of every event. Problems go to ``on_problem`` or, by
    default, to :attr:`problems` (the first :data:`MAX_KEPT_PROBLEMS`; :attr:`stats` counts
    all). Raises FileNotFoundError for a missing file and ValueError for an unknown format.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        format: str | None = None,
        run_id: str | None = None,
        on_problem: Callable[[Problem], None] | None = None,
        max_line_bytes: int = 16 * 2**20,
    ) -> None:
        self.path = Path(path)
        try:
            info = os.stat(self.path)
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"no such file: {self.path}") from exc
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(f"{self.path} is a directory, not a recorded file")
        if format is not None and format not in READERS:
            raise ValueError(f"unknown format {format!r}; choose one of {', '.join(FORMATS)}")
        if max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be positive, got {max_line_bytes}")
        if run_id is not None and not run_id:
            raise ValueError("run_id must not be empty")
        self.format: str = format if format is not None else detect_format(self.path)
        if self.format == "tensorboard" and not tensorboard_available():
            hint = install_hint("tensorboard")
            raise ValueError(f"{self.path} is a TensorBoard event file: install the extra: {hint}")
        self.run_id = run_id
        self.size: int = info.st_size
        self.max_line_bytes = max_line_bytes
        self.stats = ReadStats()
        self.problems: list[Problem] = []
        self._on_problem = on_problem

    def __repr__(self) -> str:
        return f"FileSource({str(self.path)!r}, format={self.format!r})"

    @property
    def path_run_id(self) -> str:
        """The run id the file's path gives (:func:`default_run_id`)."""
        return default_run_id(self.path, self.format)

    def _keep(self, problem: Problem) -> None:
        if len(self.problems) < MAX_KEPT_PROBLEMS:
            self.problems.append(problem)

    def __iter__(self) -> Iterator[Event]:
        """Read the file from the start; :attr:`stats` and :attr:`problems` start afresh."""
        self.problems = []
        ctx = ReadContext(
            self.path,
            fallback_run_id=default_run_id(self.path, self.format),
            run_id=self.run_id,
            report=self._on_problem if self._on_problem is not None else self._keep,
            max_line_bytes=self.max_line_bytes,
            stats=self.stats,
        )
        stats = ctx.stats
        for event in READERS[self.format](ctx):
            stats.events += 1
            stats.values += len(event.metrics)
            yield event


def expand_paths(paths: Sequence[str | Path]) -> list[Path]:
    """The files to read: each path that is a file, and for a directory the TensorBoard event
    files anywhere under it (a run directory, or a directory of runs), in name order.

    Raises FileNotFoundError for a missing path and for a directory without event files.
    """
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if not path.is_dir():
            out.append(path)
            continue
        found = sorted(f for f in path.rglob("*tfevents*") if f.is_file())
        if not found:
            raise FileNotFoundError(
                f"{path} is a directory without TensorBoard event files (events.out.tfevents.*)"
            )
        out.extend(found)
    return out


def read_events(
    paths: Sequence[str | Path],
    *,
    format: str | None = None,
    run_id: str | None = None,
    on_problem: Callable[[Problem], None] | None = None,
    max_line_bytes: int = 16 * 2**20,
) -> Iterator[Event]:
    """Events of several files, one file after another.

    Every file is opened and its format settled before the first event, so a missing file
    or an unknown format raises here, not halfway through a replay. A directory stands for
    the TensorBoard event files under it (:func:`expand_paths`).
    """
    sources = [
        FileSource(
            p, format=format, run_id=run_id, on_problem=on_problem, max_line_bytes=max_line_bytes
        )
        for p in expand_paths(paths)
    ]
    return _chain(sources)


def _chain(sources: list[FileSource]) -> Iterator[Event]:
    for source in sources:
        yield from source
