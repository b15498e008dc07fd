"""Flat JSONL: one object of ``name: value`` pairs per line, the step among them.

prime-rl's ``metrics.jsonl`` (``{"step": 12, "time": ..., "loss/mean": ...}``), ms-swift's
``logging.jsonl`` (``"global_step/max_steps": "10/560"``), and any logger that writes one flat
dict per step (``global_step``, W&B's ``_step``...). Values that are not numbers (text such as
``"1.79%"``, lists, ``null``) are not metrics and are left out. A logger that nests its metrics
by group, as EasyR1's ``experiment_log.jsonl`` does (``{"step": 1, "actor": {"kl_loss": ...},
"critic": {"score": {"mean": ...}}}``), is read with the groups joined by ``/``: verl's names.
ROLL's per-step records carry their step as ``system/step``; loggers that count iterations,
batches or episodes (``{"iteration": 3, "rewards": {"mean": 0.5}}``) carry it as
``iteration``, ``iter``, ``batch`` or ``episode``. A logger that writes several
kinds of record at one step, told apart by a ``type`` word (``{"type": "eval", "grpo_step":
5, "reward": ...}``, ``{"type": "rollout", "grpo_step": 5, "reward": ...}``), has each kind's
entries read under that word: ``eval/reward``, ``rollout/reward``. A record that says it is an
evaluation's by a flag (``"eval": true``, ``"is_eval": true``) or its split (``"split":
"val"``) has its entries read under ``eval/``: a custom recommender log writes its validation
``{"step": 200, "eval": true, "ndcg@10": 0.0222}`` between its training records, and its
``ndcg@10`` is the held-out score, not a training metric.

>>> flat_step({"global_step/max_steps": "10/560", "loss": 0.1})
('global_step/max_steps', 10)
>>> flat_step({"loss": 0.1})
(None, None)
>>> flatten({"actor": {"kl_loss": 0.01}, "critic": {"score": {"mean": 0.5}}, "x": 1})
{'actor/kl_loss': 0.01, 'critic/score/mean': 0.5, 'x': 1}
>>> record_kind({"type": "eval", "grpo_step": 5}), record_kind({"type": 3})
('eval/', '')
>>> record_kind({"step": 200, "eval": True}), record_kind({"split": "val"})
('eval/', 'eval/')
>>> record_kind({"step": 200, "eval": False}), record_kind({"split": "train"})
('', '')
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from streamwatch.events import Event, to_float
from streamwatch.sources._reading import ReadContext

__all__ = ["STEP_KEYS", "TIME_KEYS", "flat_step", "flatten", "read_flat", "record_kind"]

#: Keys that may hold the step, in order of preference.
STEP_KEYS = (
    "step",
    "global_step",
    "train/global_step",
    "trainer/global_step",
    "global_step/max_steps",
    "_step",
    "iteration",
    "system/step",
    "grpo_step",
    "iter",
    "batch",
    "episode",
)
#: Keys that may hold the time of the line, in unix seconds.
TIME_KEYS = ("time", "timestamp", "_timestamp", "wall_time")
_NOT_METRICS = frozenset(STEP_KEYS + TIME_KEYS + ("_runtime", "run_id"))


def _as_step(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        head = value.partition("/")[0].strip()  # "10/560": step 10 of 560
        if head.isdigit():
            return int(head)
    return None


def flat_step(obj: dict[str, object]) -> tuple[str | None, int | None]:
    """The key holding the step and the step it holds (``(key, None)``: not a step)."""
    for key in STEP_KEYS:
        if key in obj:
            return key, _as_step(obj[key])
    return None, None


def flatten(obj: dict[str, object], prefix: str = "") -> dict[str, object]:
    """Nested objects' entries under their path joined by ``/``; other entries as they are."""
    out: dict[str, object] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}/"))
        else:
            out[name] = value
    return out


#: The key naming a record's kind, when a logger writes several kinds at one step.
KIND_KEY = "type"
_KIND = re.compile(r"[A-Za-z][\w-]*")


#: Keys whose ``true`` marks an evaluation's record.
EVAL_FLAGS = ("eval", "is_eval", "evaluation", "validation")
#: The key naming a record's split, and the splits that are held out.
SPLIT_KEY = "split"
HELDOUT_SPLITS = frozenset({"eval", "val", "valid", "validation", "test", "heldout"})


def record_kind(obj: dict[str, object]) -> str:
    """The prefix of a record's entries: its ``type`` word and a slash, ``eval/`` for an
    evaluation's record, or nothing."""
    kind = obj.get(KIND_KEY)
    if isinstance(kind, str) and _KIND.fullmatch(kind):
        return f"{kind}/"
    split = obj.get(SPLIT_KEY)
    if isinstance(split, str) and split.lower() in HELDOUT_SPLITS:
        return "eval/"
    return "eval/" if any(obj.get(flag) is True for flag in EVAL_FLAGS) else ""


def _time(obj: dict[str, object]) -> float | None:
    for key in TIME_KEYS:
        if key in obj:
            ts = to_float(obj[key])
            if ts is not None and ts - ts == 0.0 and ts > 0:
                return ts
    return None


def read_flat(ctx: ReadContext) -> Iterator[Event]:
    """Each object line with a step becomes one event of its numeric entries."""
    run_id = ctx.file_run_id
    ctx.line_run_id = run_id
    for lineno, raw in ctx.lines():
        ok, obj = ctx.parse_json(lineno, raw)
        if not ok:
            continue
        if not isinstance(obj, dict):
            ctx.problem(lineno, f"expected a JSON object, got {type(obj).__name__}", run_id)
            continue
        key, step = flat_step(obj)
        if key is None:
            ctx.problem(lineno, f"no step (expected one of {', '.join(STEP_KEYS)})", run_id)
            continue
        if step is None:
            ctx.problem(lineno, f"{key!r} value {obj[key]!r} is not a step", run_id)
            continue
        if not ctx.stats.step_source:
            ctx.stats.step_source = repr(key)
        rid = obj.get("run_id") if ctx.run_id is None else ctx.run_id
        kind = record_kind(obj)
        metrics = {
            f"{kind}{k}": v
            for k, v in flatten(obj).items()
            if k not in _NOT_METRICS and v is not None and to_float(v) is not None
        }
        if not metrics:
            ctx.problem(lineno, "line carries no numeric values", run_id, step)
            continue
        event: dict[str, object] = {
            "run_id": rid if isinstance(rid, str) and rid else run_id,
            "step": step,
            "metrics": metrics,
        }
        ts = _time(obj)
        if ts is not None:
            event["ts"] = ts
        decoded = ctx.decode(event, lineno)
        if decoded is not None:
            yield decoded
