"""Where events come from: recorded files (streamwatch, verl and flat JSONL, HF
trainer_state.json, W&B CSV exports, console logs, TensorBoard event files, W&B run
directories' transaction logs)."""

from streamwatch.sources.files import (
    MAX_KEPT_PROBLEMS,
    FileSource,
    ReadStats,
    default_run_id,
    expand_paths,
    list_directory,
    open_sources,
    path_run_ids,
    read_events,
    unreadable,
)
from streamwatch.sources.formats import FORMATS, detect_format
from streamwatch.sources.run_ids import RunIds, run_ids

__all__ = [
    "FORMATS",
    "MAX_KEPT_PROBLEMS",
    "FileSource",
    "ReadStats",
    "RunIds",
    "default_run_id",
    "detect_format",
    "expand_paths",
    "list_directory",
    "open_sources",
    "path_run_ids",
    "read_events",
    "run_ids",
    "unreadable",
]
