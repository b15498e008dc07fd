"""W&B run directories: the transaction log ``run-<id>.wandb`` the ``wandb`` client writes.

Every ``wandb.log`` row, online or offline, is a ``history`` record of that log, beside the
run's name, id, project and config (a ``run`` record, then ``config`` records). The log is
LevelDB's log format (32 KiB blocks of records, each with its CRC-32, length and type, a record
longer than its block cut into a first, middle and last part) behind a 7-byte header
(``:W&B``, magic ``0xBEE1``, version 0); each record is a ``wandb_internal_pb2.Record``
protocol buffer. The framing is read here (recent ``wandb`` clients write the log from their
Go core and no longer ship the Python reader, ``wandb.sdk.internal.datastore``); the records
are decoded with the ``wandb`` package's own protocol buffers (the ``wandb`` extra).

Each history record is one event: its step (``step.num``, else ``_step``), its time
(``_timestamp``), its numeric values (nested keys joined by ``/``; media, tables and text are
not metrics). The run id is the run's display name, else its W&B id. What the config says that
streamwatch reads is put on every event as tags (:func:`config_tags`): the GPU count
(``gpus``, read by the cost meter), the response length cap (``max_response_length``) and the
run's W&B path (``wandb_path``, which the ``wandb_stop`` action stops).

A log read while it is written ends with a record not yet whole: :class:`RecordLog` gives the
whole records only and keeps its place for the next read.
"""

from __future__ import annotations

import importlib.util
import json
import math
import struct
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from streamwatch.events import Event, decode_event
from streamwatch.sources._reading import ReadContext

__all__ = [
    "HEADER_BYTES",
    "MAGIC",
    "RecordLog",
    "RunState",
    "config_tags",
    "is_run_log",
    "read_wandb_run",
    "run_identity",
    "wandb_available",
]

#: What every W&B transaction log starts with.
MAGIC = b":W&B"
_HEADER = struct.Struct("<4sHB")
#: The length of the log's header: a log this long holds no record yet.
HEADER_BYTES = _HEADER.size
_RECORD = struct.Struct("<IHB")
_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
#: The most bytes of the log held at once (a record's part is at most one 32 KiB block).
READ_BYTES = 16 * 2**20
#: A record cut into parts larger than this is not kept (bounds memory).
_MAX_RECORD = 256 * 2**20
_TYPE_CRC = {t: zlib.crc32(bytes([t])) for t in (_FULL, _FIRST, _MIDDLE, _LAST)}

#: Config keys (nested ones joined by ``.``) that give the GPU count, first found.
GPU_KEYS = ("gpus", "n_gpus", "num_gpus", "world_size", "trainer.n_gpus")
#: Config keys that give the response length cap (verl, TRL, OpenRLHF...), first found.
CAP_KEYS = (
    "max_response_length",
    "data.max_response_length",
    "max_completion_length",
    "generate_max_len",
    "max_new_tokens",
    "rollout.response_length",
)
_NOT_METRICS = frozenset({"_step", "_timestamp", "_runtime"})


def wandb_available() -> bool:
    return importlib.util.find_spec("wandb") is not None


def is_run_log(head: bytes) -> bool:
    """Whether a file starts as a W&B transaction log."""
    return head.startswith(MAGIC)


class RecordLog:
    """The whole records of a transaction log, read from where the last read ended.

    :meth:`read` raises ValueError when the file is not a W&B log or a record is corrupt
    (its CRC does not match, its type is unknown); the records before it were given.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.records = 0
        self._parts: list[bytes] = []

    def read(self) -> Iterator[bytes]:
        """The records written since the last read, read ``READ_BYTES`` at a time."""
        with open(self.path, "rb") as fh:
            while True:
                base = self.offset
                fh.seek(base)
                data = fh.read(READ_BYTES)
                if base == 0:
                    if len(data) < _HEADER.size:
                        return
                    self._check_header(data)
                    self.offset = _HEADER.size
                yield from self._records(data, base)
                if len(data) < READ_BYTES or self.offset == base:
                    return

    def _check_header(self, data: bytes) -> None:
        ident, magic, version = _HEADER.unpack_from(data)
        if ident != MAGIC or magic != 0xBEE1 or version != 0:
            raise ValueError("not a W&B transaction log (no ':W&B' header)")

    def _records(self, data: bytes, base: int) -> Iterator[bytes]:
        while True:
            pos = self.offset - base
            left = _BLOCK - self.offset % _BLOCK
            if left < _RECORD.size:  # a block's trailer: zeros
                if len(data) - pos < left:
                    return
                self.offset += left
                continue
            if len(data) - pos < _RECORD.size:
                return
            crc, length, kind = _RECORD.unpack_from(data, pos)
            end = pos + _RECORD.size + length
            if end > len(data):
                return
            body = data[pos + _RECORD.size : end]
            self._check(crc, kind, body)
            self.offset += _RECORD.size + length
            record = self._join(kind, body)
            if record is not None:
                self.records += 1
                yield record

    def _check(self, crc: int, kind: int, body: bytes) -> None:
        if kind not in _TYPE_CRC:
            raise ValueError(f"record at byte {self.offset}: unknown type {kind}")
        if zlib.crc32(body, _TYPE_CRC[kind]) != crc:
            raise ValueError(f"record at byte {self.offset}: its checksum does not match")

    def _join(self, kind: int, body: bytes) -> bytes | None:
        if kind == _FULL:
            self._parts = []
            return body
        if kind == _FIRST:
            self._parts = [body]
            return None
        self._parts.append(body)
        if sum(map(len, self._parts)) > _MAX_RECORD:
            self._parts = []
            raise ValueError(f"record at byte {self.offset}: larger than {_MAX_RECORD:,} bytes")
        if kind == _MIDDLE:
            return None
        whole, self._parts = b"".join(self._parts), []
        return whole


def _flat_config(items: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in items.items():
        if isinstance(value, dict) and set(value) == {"value", "desc"}:
            value = value["value"]  # config.yaml's shape
        if isinstance(value, dict):
            out.update(_flat_config(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value == int(value) and value > 0 else None


def config_tags(config: Mapping[str, object]) -> dict[str, str]:
    """The tags a run's config gives its events: ``gpus`` (a GPU key, or verl's
    ``trainer.n_gpus_per_node`` times ``trainer.nnodes``) and ``max_response_length``.

    >>> config_tags({"trainer": {"n_gpus_per_node": 8, "nnodes": 2}, "max_completion_length": 512})
    {'gpus': '16', 'max_response_length': '512'}
    """
    flat = _flat_config(config)
    tags: dict[str, str] = {}
    gpus = next((n for k in GPU_KEYS if (n := _count(flat.get(k))) is not None), None)
    per_node, nodes = (
        _count(flat.get("trainer.n_gpus_per_node")),
        _count(flat.get("trainer.nnodes")),
    )
    if gpus is None and per_node is not None:
        gpus = per_node * (nodes or 1)
    if gpus is not None:
        tags["gpus"] = str(gpus)
    cap = next((n for k in CAP_KEYS if (n := _count(flat.get(k))) is not None), None)
    if cap is not None:
        tags["max_response_length"] = str(cap)
    return tags


def _value(raw: str) -> float | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


class RunState:
    """What the records of one run say so far: its name, W&B path and config, and each
    history record as an event (:meth:`take`)."""

    def __init__(self, fallback_run_id: str, run_id: str | None = None) -> None:
        from wandb.proto import wandb_internal_pb2

        self._record_type: Any = vars(wandb_internal_pb2)["Record"]  # generated: no stubs
        self.fallback_run_id = fallback_run_id
        self.override = run_id
        self.name = ""
        self.wandb_id = ""
        self.path = ""
        self.config: dict[str, object] = {}
        self.tags: dict[str, str] = {}

    @property
    def run_id(self) -> str:
        return self.override or self.name or self.wandb_id or self.fallback_run_id

    def take(self, raw: bytes, origin: str) -> tuple[Event | None, list[str]]:
        """One record: the event of a history record (else None), and why what it holds
        could not be read (a record that does not decode)."""
        record = self._record_type()
        try:
            record.ParseFromString(raw)
        except Exception as exc:  # protobuf's DecodeError
            return None, [f"unreadable record: {exc}"]
        kind = record.WhichOneof("record_type")
        if kind == "run":
            self._run(record.run)
        elif kind == "config":
            self._config(record.config.update)
        elif kind == "history":
            return self._history(record.history, origin)
        return None, []

    def _run(self, run: Any) -> None:
        self.name = run.display_name or self.name
        self.wandb_id = run.run_id or self.wandb_id
        self.path = "/".join(p for p in (run.entity, run.project, run.run_id) if p)
        self._config(run.config.update)

    def _config(self, updates: Any) -> None:
        for item in updates:
            keys = [item.key] if item.key else list(item.nested_key)
            if not keys or keys[0] == "_wandb":
                continue
            try:
                value = json.loads(item.value_json)
            except ValueError:
                continue
            target = self.config
            for key in keys[:-1]:
                target = target.setdefault(key, {})  # type: ignore[assignment]
                if not isinstance(target, dict):
                    break
            else:
                target[keys[-1]] = value
        self.tags = config_tags(self.config)
        if self.path:
            self.tags["wandb_path"] = self.path

    def _history(self, history: Any, origin: str) -> tuple[Event | None, list[str]]:
        metrics: dict[str, object] = {}
        step = history.step.num if history.HasField("step") else None
        ts = None
        for item in history.item:
            name = item.key or "/".join(item.nested_key)
            value = _value(item.value_json)
            if value is None:
                continue
            if name == "_step" and step is None:
                step = int(value)
            elif name == "_timestamp" and math.isfinite(value) and value > 0:
                ts = value
            elif name not in _NOT_METRICS:
                metrics[name] = value
        if not metrics:
            return None, []
        obj: dict[str, object] = {"run_id": self.run_id, "step": step, "metrics": metrics}
        if ts is not None:
            obj["ts"] = ts
        if self.tags:
            obj["tags"] = dict(self.tags)
        event, problems = decode_event(obj, origin)
        return event, [p.reason for p in problems]


def run_identity(path: Path, records: int = 64) -> tuple[str, str]:
    """A W&B log's run name and W&B id, from its first records (the run record comes
    first); empty when they are not written yet or the log is unreadable."""
    state = RunState("")
    log = RecordLog(path)
    try:
        for raw in log.read():
            state.take(raw, "")
            if state.wandb_id or log.records >= records:
                break
    except (OSError, ValueError):
        pass
    return state.name, state.wandb_id


def read_wandb_run(ctx: ReadContext) -> Iterator[Event]:
    """Every history record of a W&B transaction log, one event each."""
    state = RunState(ctx.fallback_run_id, ctx.run_id)
    ctx.line_run_id = ctx.file_run_id
    ctx.stats.step_source = "each history record's step"
    log = RecordLog(ctx.path)
    try:
        for raw in log.read():
            where = f"record {log.records}"
            ctx.stats.lines = log.records
            event, reasons = state.take(raw, ctx.origin(where))
            for reason in reasons:
                ctx.problem(where, reason, state.run_id)
            if event is not None:
                ctx.stats.where = where
                yield event
    except ValueError as exc:
        ctx.problem(f"record {log.records + 1}", str(exc), state.run_id)
    ctx.stats.bytes_read = log.offset
    if log.records == 0:
        ctx.problem(1, "no W&B records in the file", ctx.file_run_id)
