"""Where events come from: recorded files (streamwatch/verl JSONL, HF trainer_state.json,
W&B CSV exports)."""

from .files import MAX_KEPT_PROBLEMS, FileSource, ReadStats, default_run_id, read_events
from .formats import FORMATS, detect_format

__all__ = [
    "FORMATS",
    "MAX_KEPT_PROBLEMS",
    "FileSource",
    "ReadStats",
    "default_run_id",
    "detect_format",
    "read_events",
]
