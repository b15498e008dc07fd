"""Weights & Biases CSV exports: a header row, then one row per logged step.

Chart exports name their columns ``"<run name> - <metric>"`` and add ``__MIN``/``__MAX``
columns for smoothing bands; run-history exports use bare metric names and W&B's own
``_step``, ``_runtime`` and ``_timestamp`` columns. An empty cell means the metric was not
logged at that step.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from streamwatch.events import Event, to_float
from streamwatch.sources._reading import ReadContext, preview

__all__ = ["STEP_COLUMNS", "read_wandb_csv"]

#: Columns that may hold the step, in order of preference: the trainer's own step (what
#: transformers logs with every entry) before W&B's ``_step``, which counts ``wandb.log`` calls.
STEP_COLUMNS = ("train/global_step", "trainer/global_step", "_step", "Step", "step")
_TS_COLUMN = "_timestamp"
_BAND_SUFFIXES = ("__MIN", "__MAX")
_RUN_SEPARATOR = " - "


@dataclass(frozen=True)
class _Layout:
    width: int
    step: int
    ts: int | None
    metrics: list[tuple[int, str]]
    run_id: str | None  # the shared "<run> - " prefix of every metric column, if any


def split_run_prefix(names: Sequence[str]) -> tuple[str | None, list[str]]:
    """Strip the longest ``"X - "`` prefix that every name shares; return ``(X, rest)``."""
    if not names:
        return None, list(names)
    first = names[0]
    end = first.rfind(_RUN_SEPARATOR)
    while end > 0:
        prefix = first[: end + len(_RUN_SEPARATOR)]
        if all(n.startswith(prefix) and len(n) > len(prefix) for n in names):
            return first[:end], [n[len(prefix) :] for n in names]
        end = first.rfind(_RUN_SEPARATOR, 0, end)
    return None, list(names)


def _layout(header: list[str]) -> _Layout | str:
    names = [h.strip() for h in header]
    step = next((names.index(c) for c in STEP_COLUMNS if c in names), None)
    if step is None:
        return f"no step column in the header (expected one of {', '.join(STEP_COLUMNS)})"
    columns = [
        (i, name)
        for i, name in enumerate(names)
        if i != step
        and name
        and name not in STEP_COLUMNS
        and not name.startswith("_")
        and not name.endswith(_BAND_SUFFIXES)
    ]
    run_id, metric_names = split_run_prefix([name for _, name in columns])
    ts = names.index(_TS_COLUMN) if _TS_COLUMN in names else None
    metrics = [(i, name) for (i, _), name in zip(columns, metric_names, strict=True)]
    return _Layout(len(names), step, ts, metrics, run_id)


def _parse_step(cell: str) -> int | str:
    """An integer step, or the text itself (which validation then reports)."""
    text = cell.strip()
    try:
        return int(text)
    except ValueError:
        pass
    number = to_float(text)
    if number is not None and math.isfinite(number) and number.is_integer():
        return int(number)
    return text


def _cells(ctx: ReadContext, lineno: int, raw: bytes) -> list[str] | None:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        ctx.problem(lineno, f"invalid UTF-8 at byte {exc.start}: {preview(raw)}", ctx.line_run_id)
        return None
    try:
        return next(csv.reader((text,)))
    except (csv.Error, StopIteration) as exc:
        ctx.problem(lineno, f"unreadable CSV row ({exc}): {preview(text)}", ctx.line_run_id)
        return None


def read_wandb_csv(ctx: ReadContext) -> Iterator[Event]:
    """One event per row that has at least one metric cell filled in."""
    ctx.line_run_id = ctx.file_run_id
    layout: _Layout | None = None
    run_id = ctx.file_run_id
    for lineno, raw in ctx.lines():
        cells = _cells(ctx, lineno, raw)
        if layout is None:
            found = _layout(cells) if cells is not None else "the header row cannot be read"
            if isinstance(found, str):
                ctx.problem(lineno, f"{found}; file not read", run_id)
                return
            layout = found
            ctx.stats.step_source = repr(cells[layout.step].strip()) if cells else ""
            if ctx.run_id is None and layout.run_id is not None:
                run_id = ctx.line_run_id = layout.run_id
            continue
        if cells is None:
            continue
        event = _row_event(ctx, lineno, cells, layout, run_id)
        if event is not None:
            yield event


def _row_event(
    ctx: ReadContext, lineno: int, cells: list[str], layout: _Layout, run_id: str
) -> Event | None:
    if len(cells) != layout.width:
        ctx.problem(lineno, f"row has {len(cells)} cells, the header has {layout.width}", run_id)
        return None
    metrics = {name: cells[i] for i, name in layout.metrics if cells[i].strip()}
    if not metrics:
        return None  # nothing exported was logged at this step
    step_cell = cells[layout.step]
    if not step_cell.strip():
        ctx.problem(lineno, "the step cell is empty", run_id)
        return None
    step = _parse_step(step_cell)
    obj: dict[str, object] = {"run_id": run_id, "step": step, "metrics": metrics}
    if layout.ts is not None and cells[layout.ts].strip():
        ts = to_float(cells[layout.ts])
        if ts is not None and math.isfinite(ts):
            obj["ts"] = ts
        else:
            ctx.problem(
                lineno,
                f"'{_TS_COLUMN}' value {cells[layout.ts]!r} is not a time; left out",
                run_id,
                step if isinstance(step, int) else None,
            )
    return ctx.decode(obj, lineno)
