"""TensorBoard event files, read with the ``tensorboard`` package (the ``tensorboard`` extra).

An event file holds one record per scalar (PyTorch's ``SummaryWriter.add_scalar``, which verl,
OpenRLHF, NeMo RL, slime, SkyRL, AReaL, ROLL and transformers use) or several per record
(TensorFlow's summaries). Consecutive scalars of one step become one event, stamped with the
record's wall time. The run id is the directory holding the file (``tensorboard_log/<project>/
<experiment>/events.out.tfevents...`` -> ``<experiment>``). A record cut short at the end of a
file that is still being written ends the reading there; anything else unreadable is a problem.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from streamwatch.events import Event
from streamwatch.sources._reading import ReadContext

__all__ = ["MAGIC", "is_event_file", "read_tensorboard", "tensorboard_available"]

#: What the first record of every event file says.
MAGIC = b"brain.Event:"
#: A step's scalars beyond this many start a new event (bounds memory).
_MAX_GROUP = 10_000


def tensorboard_available() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


def is_event_file(path: Path, head: bytes) -> bool:
    """An event file: its name says so, or its first record is a file-version record."""
    return "tfevents" in path.name or MAGIC in head[:64]


def _scalars(event: Any, make_ndarray: Any) -> Iterator[tuple[str, object]]:
    for value in event.summary.value:
        kind = value.WhichOneof("value")
        if kind == "simple_value":
            yield value.tag, float(value.simple_value)
        elif kind == "tensor" and not value.tensor.tensor_shape.dim:
            array = make_ndarray(value.tensor)
            if array.dtype.kind in "fiu":
                yield value.tag, float(array.item())


def read_tensorboard(ctx: ReadContext) -> Iterator[Event]:
    """The scalars of one event file, a step's consecutive scalars as one event."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util.tensor_util import make_ndarray

    run_id = ctx.file_run_id
    ctx.line_run_id = run_id
    stats = ctx.stats
    stats.step_source = "each record's step"
    step = -1
    ts: float | None = None
    metrics: dict[str, object] = {}
    first = 0
    records = 0
    try:
        for event in EventFileLoader(str(ctx.path)).Load():
            records += 1
            stats.lines = records
            if event.WhichOneof("what") != "summary":
                continue
            if metrics and (event.step != step or len(metrics) >= _MAX_GROUP):
                done = _flush(ctx, first, run_id, step, ts, metrics)
                metrics = {}
                if done is not None:
                    yield done
            if not metrics:
                step, ts, first = event.step, event.wall_time, records
            for tag, x in _scalars(event, make_ndarray):
                if tag in metrics:  # the same tag twice in one step: a step of its own
                    done = _flush(ctx, first, run_id, step, ts, metrics)
                    metrics, first = {}, records
                    if done is not None:
                        yield done
                metrics[tag] = x
    except Exception as exc:  # the loader raises protobuf and its own errors on corrupt data
        ctx.problem(
            f"record {records + 1}",
            f"not a readable TensorBoard event file past record {records}: {exc}",
            run_id,
        )
    stats.bytes_read = ctx.path.stat().st_size
    done = _flush(ctx, first, run_id, step, ts, metrics)
    if done is not None:
        yield done
    if records == 0:
        ctx.problem(1, "no TensorBoard records in the file", run_id)


def _flush(
    ctx: ReadContext,
    record: int,
    run_id: str,
    step: int,
    ts: float | None,
    metrics: dict[str, object],
) -> Event | None:
    if not metrics:
        return None
    obj: dict[str, object] = {"run_id": run_id, "step": step, "metrics": metrics}
    if ts:
        obj["ts"] = ts
    return ctx.decode(obj, f"record {record}")
