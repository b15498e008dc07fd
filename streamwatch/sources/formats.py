"""Recognising a recorded file's format from its first bytes."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from streamwatch.events import Event
from streamwatch.sources._console import looks_like_console, read_console
from streamwatch.sources._flat import STEP_KEYS, read_flat
from streamwatch.sources._jsonl import read_streamwatch, read_verl
from streamwatch.sources._reading import BOM, ReadContext, preview
from streamwatch.sources._tensorboard import is_event_file, read_tensorboard
from streamwatch.sources._trainer_state import read_trainer_state
from streamwatch.sources._wandb_csv import STEP_COLUMNS, read_wandb_csv
from streamwatch.sources._wandb_run import is_run_log, read_wandb_run

__all__ = ["FORMATS", "READERS", "detect_format"]

#: Reader per format name: streamwatch JSONL, verl file-logger JSONL, HF trainer_state.json,
#: W&B CSV export, flat JSONL (prime-rl, ms-swift), console logs (verl, ROLL, HF/TRL),
#: TensorBoard event files, W&B run directories' transaction logs (``run-<id>.wandb``).
READERS: dict[str, Callable[[ReadContext], Iterator[Event]]] = {
    "streamwatch": read_streamwatch,
    "verl": read_verl,
    "hf": read_trainer_state,
    "wandb": read_wandb_csv,
    "flat": read_flat,
    "console": read_console,
    "tensorboard": read_tensorboard,
    "wandb-run": read_wandb_run,
}
FORMATS = tuple(READERS)

_SNIFF_BYTES = 64 * 1024
#: A console log may print a long preamble (model loading, progress bars) before its first
#: metrics line: its patterns are looked for further in.
_CONSOLE_SNIFF_BYTES = 4 * 2**20
_SNIFF_LINES = 32
#: A JSON list of objects (a log line may start with ``[`` too: ``[2025-07-26 10:00:00]``).
_LIST_OF_OBJECTS = re.compile(rb"\[\s*\{")


def detect_format(path: str | Path) -> str:
    """The format of a recorded file, judged from its first 64 KiB.

    An empty file reads as streamwatch JSONL (whose reader reports it as empty). Raises
    ValueError, naming the file, when the content is none of the known formats.
    """
    path = Path(path)
    with open(path, "rb") as fh:
        head = fh.read(_SNIFF_BYTES)
    if is_event_file(path, head):
        return "tensorboard"
    if is_run_log(head):
        return "wandb-run"
    whole = len(head) < _SNIFF_BYTES
    head = head.removeprefix(BOM)
    text = head.lstrip()
    if not text:
        return "streamwatch"
    if text.startswith(b"{'"):
        return "console"  # a printed Python dict, not JSON
    if text.startswith(b"{"):
        return _detect_json(path, head, whole)
    if _LIST_OF_OBJECTS.match(text) and b'"step"' in head:
        return "hf"  # a bare log_history: json.dump(trainer.state.log_history, f)
    first_line = text.split(b"\n", 1)[0].decode("utf-8", "replace")
    try:
        header = next(csv.reader((first_line,)))
    except (csv.Error, StopIteration):
        header = []
    if any(cell.strip() in STEP_COLUMNS for cell in header):
        return "wandb"
    if _console(path, head, whole):
        return "console"
    if any(ln.lstrip().startswith(b"{") for ln in text.split(b"\n")[:_SNIFF_LINES]):
        return _detect_json(path, head, whole)  # JSON lines after a corrupt start
    raise _unknown(path, text)


def _console(path: Path, head: bytes, whole: bool) -> bool:
    if looks_like_console(head):
        return True
    if whole:
        return False
    with open(path, "rb") as fh:
        return looks_like_console(fh.read(_CONSOLE_SNIFF_BYTES))


def _json_kind(obj: dict[str, object]) -> str | None:
    if "log_history" in obj:
        return "hf"
    if "metrics" in obj or ("name" in obj and ("value" in obj or "step" in obj)):
        return "streamwatch"  # an event, or one value of one: {"name": ..., "value": ...}
    if "data" in obj and "step" in obj:
        return "verl"
    if any(key in obj for key in STEP_KEYS):
        return "flat"
    return None


def _detect_json(path: Path, head: bytes, whole: bool) -> str:
    lines = head.split(b"\n")
    if not whole:
        lines.pop()  # possibly cut short
    seen_object = False
    for line in lines[:_SNIFF_LINES]:
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict):
            seen_object = True
            kind = _json_kind(obj)
            if kind is not None:
                return kind
    if b'"log_history"' in head or path.name == "trainer_state.json":
        return "hf"
    if seen_object:
        raise _not_a_log(path, "JSON objects without 'metrics', 'name', 'data' or a step")
    if head.lstrip().split(b"\n", 1)[0].strip() == b"{":
        raise _not_a_log(path, "a JSON document without 'log_history'" + _keys(head, whole))
    # Nothing parsed (the first lines are corrupt or very long): judge by the keys in view.
    if b'"data"' in head and b'"metrics"' not in head and b'"name"' not in head:
        return "verl"
    return "streamwatch"


def _keys(head: bytes, whole: bool) -> str:
    """``", keys 'name', 'version', ..."``: what a whole JSON document holds instead."""
    if not whole:
        return ""
    try:
        obj = json.loads(head)
    except (ValueError, RecursionError):
        return ""
    if not isinstance(obj, dict) or not obj:
        return ""
    keys = [str(k) for k in obj][:5]
    return ", keys " + ", ".join(repr(k) for k in keys) + (", ..." if len(obj) > 5 else "")


def _not_a_log(path: Path, what: str) -> ValueError:
    """JSON with no step or metrics in the shape of a log (an npm package.json, a
    config, a results summary): not a metrics log."""
    return _unknown(path, b"", what, "not a metrics log")


def _unknown(
    path: Path, head: bytes, what: str | None = None, verdict: str = "unknown file format"
) -> ValueError:
    found = what or f"starts with {preview(head.lstrip()[:40])}"
    return ValueError(
        f"{path}: {verdict} ({found}); expected streamwatch, verl or flat JSONL,"
        " a trainer_state.json, a W&B CSV export, a console log of verl, ROLL or the HF"
        " Trainer, a TensorBoard event file or a W&B run's run-<id>.wandb"
        f" (choose one with --format: {', '.join(READERS)})"
    )
