"""The run id a recorded file gives when its data names none, told apart from the other
files read with it.

One file gives the id it has always given (:func:`default_run_id`). Files that would give
the same id from different places are told apart by the shortest run of directories above
them that differs: ``exps/run-a/train.log`` and ``exps/run-b/train.log`` are the runs
``run-a`` and ``run-b`` (the file name they share is dropped), two Hugging Face output
directories ``a/sft`` and ``b/sft`` the runs ``a/sft`` and ``b/sft``. Files of one place (the
TensorBoard event files of a directory; ``log.json`` and ``log.jsonl`` side by side) keep one
id: they are one run. Every reader of files names runs with these functions: ``replay``,
``inspect``, ``watch``, ``report``, ``ledger`` and ``publish``.

>>> from pathlib import Path
>>> ids = run_ids([(Path("exps/run-a/train.log"), "console"),
...                (Path("exps/run-b/train.log"), "console"),
...                (Path("exps/run-b/eval.jsonl"), "flat")])
>>> sorted(ids.values())
['eval', 'run-a', 'run-b']
>>> run_ids([(Path("exps/run-a/train.log"), "console")])[Path("exps/run-a/train.log")]
'train'
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

__all__ = ["RunIds", "default_run_id", "run_ids"]

_CHECKPOINT_PREFIX = "checkpoint-"
#: flat logs whose file name is the framework's, not the run's (prime-rl, ms-swift)
_GENERIC_STEMS = frozenset({"metrics", "logging"})

#: A run's place: the absolute path parts it is named after, and whether that is a
#: directory (else a directory and a file name without its extension).
Place = tuple[tuple[str, ...], bool]


#: the folder Hugging Face's Trainer (and TRL's) logs TensorBoard into by default:
#: ``runs/Dec07_12-00-00_host`` (``%b%d_%H-%M-%S`` and the host name)
_HF_DATE_DIR = re.compile(r"^[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}_.+$")
#: folders a trainer names for what is logged in them, not for the run
_LOGGING_DIRS = frozenset({"logs", "runs"})


def _event_dir(path: Path) -> Path:
    """The directory that names a TensorBoard event file's run: its own, except in the
    default layouts of Hugging Face and TRL, whose folders are named for the date or for
    logging, where it is the output directory above them: ``out/runs/Dec07_12-00-00_host``
    and ``out/logs`` -> ``out``.

    >>> _event_dir(Path("/x/out/runs/Dec07_12-00-00_host/events.out.tfevents.1.h")).name
    'out'
    >>> _event_dir(Path("/x/out/logs/events.out.tfevents.1.h")).name
    'out'
    >>> _event_dir(Path("/x/tb/grpo-a/events.out.tfevents.1.h")).name
    'grpo-a'
    """
    d = path.absolute().parent
    if _HF_DATE_DIR.match(d.name) and d.parent.name:
        d = d.parent
    if d.name in _LOGGING_DIRS and d.parent.name:
        d = d.parent
    return d


def _named_by_directory(path: Path, format: str) -> bool:
    return format == "tensorboard" or (format == "flat" and path.stem in _GENERIC_STEMS)


def _output_dir(path: Path) -> Path:
    """The training output directory of a trainer_state.json (above a ``checkpoint-N``)."""
    parent = path.absolute().parent
    if parent.name.startswith(_CHECKPOINT_PREFIX) and parent.parent.name:
        return parent.parent
    return parent


def default_run_id(path: Path, format: str) -> str:
    """The run id a file gives when its data names none, on its own.

    The file name without its extension (``runs/grpo-a.jsonl`` -> ``grpo-a``); for a file
    called ``trainer_state.json``, the training output directory
    (``out/sft-7b/checkpoint-500/trainer_state.json`` -> ``sft-7b``); for a TensorBoard event
    file, or a flat log named ``metrics.jsonl`` or ``logging.jsonl``, its directory
    (``tb/grpo-a/events.out.tfevents.1.host`` -> ``grpo-a``), the output directory above a
    Trainer's ``runs/<date>`` or ``logs`` folder (``out/runs/Dec07_12-00-00_host/...`` ->
    ``out``).
    """
    if format == "tensorboard":
        return _event_dir(path).name or path.name
    if _named_by_directory(path, format):
        return path.absolute().parent.name or path.name
    if format == "hf" and path.name == "trainer_state.json":
        return _output_dir(path).name or path.stem
    if format == "wandb-run":  # run-<id>.wandb: its W&B id (the data names the run)
        return path.stem.removeprefix("run-") or path.name
    return path.stem or path.name


def place(path: Path, format: str) -> Place:
    """Where a file's run is: the directory its id names, or its directory and stem."""
    if format == "tensorboard":
        return _event_dir(path).parts, True
    if _named_by_directory(path, format):
        return path.absolute().parent.parts, True
    if format == "hf" and path.name == "trainer_state.json":
        return _output_dir(path).parts, True
    return (*path.absolute().parent.parts, path.stem), False


def _above(p: Place) -> tuple[str, ...]:
    """The directories above the name a place shares with the others of its group, without
    the root."""
    return tuple(x for x in p[0][:-1] if x != os.sep and not x.endswith((":\\", ":/")))


def _shortest(group: list[Place]) -> dict[Place, tuple[str, ...]]:
    """Per place, the fewest directories above it that no other place of the group ends
    with (all of them, for a place no run of directories tells apart)."""
    above = {p: _above(p) for p in group}
    out: dict[Place, tuple[str, ...]] = {}
    for k in range(1, max(len(a) for a in above.values()) + 1):
        counts = Counter(a[-k:] for a in above.values())
        for p, a in above.items():
            if p not in out and (counts[a[-k:]] == 1 or k >= len(a)):
                out[p] = a[-k:]
    return {p: out.get(p, a) for p, a in above.items()}


def _told_apart(group: list[Place]) -> dict[Place, str]:
    """Ids for places that share one id: the shortest distinct run of directories above
    each (with the directory named for places named after one)."""
    by_files = not any(by_dir for _, by_dir in group)
    out: dict[Place, str] = {}
    for p, dirs in _shortest(group).items():
        parts = dirs if by_files else (*dirs, p[0][-1])
        out[p] = "/".join(parts) or p[0][-1]
    return out


def _whole(p: Place) -> str:
    """A place's full path (from the current directory when below it; a directory's ends in
    ``/``): the last resort."""
    path = Path(*p[0])
    try:
        text = path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        text = path.as_posix()
    return text + "/" if p[1] else text


def _assign(places: dict[Place, str]) -> dict[Place, str]:
    """Each place's id: its own when no other place gives it, else told apart; a place whose
    id another still has is named by its whole path."""
    groups: dict[str, list[Place]] = {}
    for p, rid in places.items():
        groups.setdefault(rid, []).append(p)
    out: dict[Place, str] = {}
    for rid, group in groups.items():
        out.update({group[0]: rid} if len(group) == 1 else _told_apart(group))
    counts: dict[str, int] = {}
    for rid in out.values():
        counts[rid] = counts.get(rid, 0) + 1
    return {p: rid if counts[rid] == 1 else _whole(p) for p, rid in out.items()}


def run_ids(files: Iterable[tuple[Path, str]]) -> dict[Path, str]:
    """The run id each (file, format) gives when its data names none, told apart from the
    others (see the module doc)."""
    return RunIds(files).ids


class RunIds:
    """Run ids of files, the same for a file once given: files added later (a log that
    appears in a watched directory) are told apart from the ones named before, which keep
    their ids."""

    def __init__(self, files: Iterable[tuple[Path, str]] = ()) -> None:
        self.ids: dict[Path, str] = {}
        #: each place named so far: the id it gives on its own, and the one it was given
        self._own: dict[Place, str] = {}
        self._given: dict[Place, str] = {}
        self.add(files)

    def add(self, files: Iterable[tuple[Path, str]]) -> None:
        """Name the files not named yet, together."""
        new = {path: fmt for path, fmt in files if path not in self.ids}
        places = {path: place(path, fmt) for path, fmt in new.items()}
        fresh: dict[Place, str] = {}
        for path, p in places.items():
            if p not in self._given and p not in fresh:
                fresh[p] = default_run_id(path, new[path])
        named = _assign({**self._own, **fresh}) if fresh else {}
        taken = set(self._given.values())
        for p, rid in fresh.items():
            self._own[p] = rid
            self._given[p] = named[p] if named[p] not in taken else _whole(p)
        for path, p in places.items():
            self.ids[path] = self._given[p]

    def __call__(self, path: Path, format: str) -> str:
        """The id of ``path`` (named now, if it is new)."""
        if path not in self.ids:
            self.add([(path, format)])
        return self.ids[path]
