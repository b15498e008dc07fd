"""The snapshot format of one run's detection state: what checkpoints carry between processes.

A snapshot is a header line of JSON (format name, version, run id) and the run's state.
Any process of the same version restores it; a snapshot of another version (or bytes that
are not one) raise :class:`SnapshotError`, which names the run and both versions, so the
caller can start that run afresh and say so. ``VERSION`` changes whenever the state's
classes change shape.

The state itself is pickled: plain Python objects of this package and river's compiled
windows (which pickle themselves). Restore only snapshots written by a streamwatch process
(the service's own state topic): unpickling runs code named in the bytes.

>>> from streamwatch.config import EngineConfig
>>> from streamwatch.engine.run import RunState
>>> blob = dump_run(RunState("grpo-7b", EngineConfig()))
>>> blob.split(b"\\n", 1)[0]
b'{"format":"streamwatch.run","run_id":"grpo-7b","version":42}'
>>> load_run(blob).run_id
'grpo-7b'
>>> try:
...     load_run(blob.replace(b'"version":42', b'"version":41'))
... except SnapshotError as exc:
...     print(exc)
snapshot of run 'grpo-7b' is version 41; this streamwatch reads version 42
"""

from __future__ import annotations

import json
import pickle
from typing import Any

from streamwatch.engine.run import RunState

__all__ = ["FORMAT", "VERSION", "SnapshotError", "dump_run", "load_run"]

FORMAT = "streamwatch.run"
VERSION = 42


class SnapshotError(ValueError):
    """Bytes that this version cannot restore; ``run_id`` and ``version`` when known."""

    def __init__(self, message: str, run_id: str | None = None, version: Any = None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.version = version


def dump_run(run: RunState) -> bytes:
    header = {"format": FORMAT, "run_id": run.run_id, "version": VERSION}
    head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
    return head + b"\n" + pickle.dumps(run, protocol=pickle.HIGHEST_PROTOCOL)


def load_run(blob: bytes) -> RunState:
    head, sep, body = blob.partition(b"\n")
    try:
        header = json.loads(head) if sep else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise SnapshotError(f"not a streamwatch run snapshot (this one reads version {VERSION})")
    run_id = header.get("run_id")
    version = header.get("version")
    if version != VERSION:
        raise SnapshotError(
            f"snapshot of run {run_id!r} is version {version}; this streamwatch reads version "
            f"{VERSION}",
            run_id,
            version,
        )
    try:
        run = pickle.loads(body)
    except Exception as exc:  # a damaged body: any error unpickling it
        why = f"snapshot of run {run_id!r} is damaged: {exc}"
        raise SnapshotError(why, run_id, version) from exc
    if not isinstance(run, RunState) or run.run_id != run_id:
        raise SnapshotError(f"snapshot of run {run_id!r} holds no such run", run_id, version)
    return run
