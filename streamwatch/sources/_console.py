"""Console logs: the metrics lines frameworks print, among everything else a job prints.

Five kinds of line are read, anywhere in a line (after a Ray prefix such as
``(TaskRunner pid=1)``, a logger's time stamp, or tqdm's progress bar):

- verl's console logger: ``step:59 - actor/entropy:0.41 - critic/score/mean:0.7 - ...``;
- ROLL's stdout tracker: ``metrics_tag: {"step": 3, "metrics": {...}}``;
- mlx-lm's trainers (and mlx-lm-lora's GRPO): ``Iter 5: Train loss 0.012, Total rewards mean
  0.5, ..., Peak mem 34.7 GB``, names of several words, a unit after the value dropped;
- the dicts the Hugging Face Trainer (and TRL) print: ``{'loss': 0.1, 'grad_norm': nan, ...}``,
  or, in recent transformers versions, with each value quoted (``{'loss': '0.2218', ...}``).
  They carry no step: it is the count of the training progress bar printed before them
  (``10/43 [14:12<44:45, 81.39s/it]``, the bar with the largest total). A bar that has not
  started (0) or has already ended when the first dict comes says nothing of the dicts' steps:
  their output was held back (stdout is buffered when it goes to a file, the bar is written
  to stderr at once) and comes as one block, with the bar before it. Then, as with no bar at
  all, a dict's step is its place among the training dicts (1, 2, ...); an evaluation dict
  (``eval_*`` only) or the closing summary (``train_runtime``) takes the step of the dict
  before it.

- the blocks XTuner's RL trainer and AReaL's stats logger print, a step header and its
  values (:mod:`~streamwatch.sources._blocks`).

Every other line is not metrics and is passed over without a problem.

>>> parse_verl("(TaskRunner pid=7) step:4 - actor/entropy:0.5 - perf/mfu:np.float64(0.3)")
(4, {'actor/entropy': '0.5', 'perf/mfu': '0.3'})
>>> parse_printed_dict("{'loss': 0.0, 'grad_norm': nan, 'epoch': 0.23, 'note': 'x'}")
{'loss': '0.0', 'grad_norm': 'nan', 'epoch': '0.23'}
>>> parse_printed_dict("{'loss': '1.169e-05', 'kl': '0', 'note': 'x', 'lr': 'nan'}")
{'loss': '1.169e-05', 'kl': '0', 'lr': 'nan'}
>>> parse_mlx("Iter 3: Train loss -0.673, Learning Rate 1.000e-05, Peak mem 32.940 GB")
(3, {'Train loss': '-0.673', 'Learning Rate': '1.000e-05', 'Peak mem': '32.940'})
>>> parse_mlx("Iter 100: Saved adapter weights to adapters.safetensors.") is None
True
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from streamwatch.events import Event, to_float
from streamwatch.sources._blocks import SNIFF as BLOCK_SNIFF
from streamwatch.sources._blocks import Blocks
from streamwatch.sources._reading import ReadContext, preview

__all__ = ["looks_like_console", "parse_mlx", "parse_printed_dict", "parse_verl", "read_console"]

_VERL = re.compile(r"(?:^|[\s)\]])step:(-?\d+) - (.+)")
_ROLL = "metrics_tag: "
_DICT = re.compile(r"\{'[^']+': ")
_ENTRY = re.compile(r"'((?:[^'\\]|\\.)+)':\s*([^,}]+)")
_WRAPPED = re.compile(r"^[A-Za-z_][\w.]*\((.*)\)$")  # np.float64(0.5), tensor(0.5)
_BAR = re.compile(r"(\d+)/(\d+) \[[^\]]*?(?:it/s|s/it)")
_MLX = re.compile(r"(?:^|\s)Iter (\d+): (.+)")
#: one ``Name value[unit]`` of an mlx-lm line: the value is the last word that is a number
_MLX_PAIR = re.compile(
    r"^(\S.*?)\s+([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf)\s*(?:[A-Za-z%]{1,3})?$"
)
_SNIFF = (
    re.compile(rb"(?:^|[\s)\]])step:\d+ - [\w/@.-]+:"),
    re.compile(rb"metrics_tag: \{"),
    re.compile(rb"\{'[\w/@.-]+': ['\"]?-?(?:\d|nan|inf)"),
    re.compile(rb"(?:^|\s)Iter \d+: [A-Za-z][\w /]* -?\d"),
    *BLOCK_SNIFF,
)


def looks_like_console(head: bytes) -> bool:
    """Whether the start of a file holds a metrics line of a known console format."""
    return any(p.search(head) for p in _SNIFF)


def _value(text: str) -> str:
    text = text.strip()
    wrapped = _WRAPPED.match(text)
    return wrapped.group(1).strip() if wrapped else text


def parse_verl(line: str) -> tuple[int, dict[str, str]] | None:
    """A verl console line's step and raw values, or None if the line is not one."""
    found = _VERL.search(line)
    if found is None:
        return None
    values: dict[str, str] = {}
    for pair in found.group(2).split(" - "):
        name, sep, value = pair.rpartition(":")
        if sep and name.strip():
            values[name.strip()] = _value(value)
    return int(found.group(1)), values


def parse_printed_dict(line: str) -> dict[str, str] | None:
    """The numeric-looking entries of a printed Python dict, or None if the line has none.

    The dict begins its line, or what follows the line's last carriage return (a progress
    bar drawn before it): a dict quoted inside a sentence is not a log record.

    >>> parse_printed_dict("Updated tokens: {'eos_token_id': 248046}.") is None
    True
    """
    start = _DICT.search(line)
    if start is None or line[: start.start()].rpartition("\r")[2].strip():
        return None
    end = line.rfind("}")
    body = line[start.start() : end + 1 if end > start.start() else len(line)]
    values: dict[str, str] = {}
    for name, value in _ENTRY.findall(body):
        value = value.strip()
        if value[:1] in ("'", '"'):
            inner = value[1:-1] if len(value) > 1 and value[-1] == value[0] else ""
            if to_float(inner) is None:
                continue  # a text entry, or a number as a string: only the latter is a value
            value = inner
        values[name] = _value(value)
    return values or None


def parse_mlx(line: str) -> tuple[int, dict[str, str]] | None:
    """An mlx-lm line's step and raw values, or None if the line has no ``Name value``."""
    found = _MLX.search(line)
    if found is None:
        return None
    values: dict[str, str] = {}
    for piece in found.group(2).split(", "):
        pair = _MLX_PAIR.match(piece.strip())
        if pair is not None:
            values[pair.group(1)] = pair.group(2)
    return (int(found.group(1)), values) if values else None


class _Bar:
    """The training progress bar: its count is the step of the dicts printed after it."""

    def __init__(self) -> None:
        self.total = 0
        self.step: int | None = None

    def update(self, line: str) -> None:
        for done, total in _BAR.findall(line):
            if int(total) >= self.total:
                self.total = int(total)
                self.step = int(done)


#: keys of the Trainer's closing summary dict (``{'train_runtime': ..., 'train_loss': ...}``)
_SUMMARY = "train_runtime"


class _DictSteps:
    """The step of each printed dict: the bar's count, or the dicts' own order.

    >>> bar, steps = _Bar(), _DictSteps()
    >>> bar.update("100%|##| 200/200 [1:46:43<00:00, 32.02s/it]")
    >>> [steps.step({'loss': '0'}, bar), steps.step({'loss': '1'}, bar)]
    [1, 2]
    >>> [steps.step({'eval_loss': '1'}, bar), steps.step({'train_runtime': '9'}, bar)]
    [2, 2]
    """

    def __init__(self) -> None:
        self.counted: bool | None = None  # decided at the first dict
        self.count = 0

    def step(self, values: dict[str, str], bar: _Bar) -> int:
        if self.counted is None:
            self.counted = bar.step is None or bar.step in (0, bar.total)
        if not self.counted:
            assert bar.step is not None
            return bar.step
        training = _SUMMARY not in values and not all(k.startswith("eval_") for k in values)
        if training or self.count == 0:
            self.count += 1
        return self.count

    def source(self) -> str:
        if self.counted:
            return "the printed dicts' order (no progress bar before each)"
        return "the training progress bar's count"


def read_console(ctx: ReadContext) -> Iterator[Event]:
    """The metrics lines of a console log, one event each (see the module documentation)."""
    run_id = ctx.file_run_id
    ctx.line_run_id = run_id
    bar = _Bar()
    dicts = _DictSteps()
    blocks = Blocks()
    for lineno, raw in ctx.lines():
        line = raw.decode("utf-8", "replace")
        inside, block = blocks.feed(line.rstrip("\r\n"))
        if block is not None:
            ctx.stats.step_source = "the step header of XTuner's or AReaL's blocks"
            done = _event(ctx, lineno, block[0], block[1])
            if done is not None:
                yield done
        if inside:
            continue
        roll = line.find(_ROLL)
        if roll >= 0:
            ctx.stats.step_source = "ROLL's metrics_tag 'step'"
            event = _roll_line(ctx, lineno, raw[raw.find(b"metrics_tag: ") + len(_ROLL) :])
        elif (verl := parse_verl(line)) is not None:
            ctx.stats.step_source = "verl's step:N"
            event = _event(ctx, lineno, verl[0], verl[1])
        elif (mlx := parse_mlx(line)) is not None:
            ctx.stats.step_source = "mlx-lm's Iter N"
            event = _event(ctx, lineno, mlx[0], mlx[1])
        elif (printed := parse_printed_dict(line)) is not None:
            bar.update(line[: _DICT.search(line).start()])  # type: ignore[union-attr]
            step = dicts.step(printed, bar)
            ctx.stats.step_source = dicts.source()
            event = _event(ctx, lineno, step, printed)
        else:
            bar.update(line)
            continue
        if event is not None:
            yield event
    block = blocks.close()
    if block is not None:
        done = _event(ctx, ctx.stats.lines, block[0], block[1])
        if done is not None:
            yield done


def _event(ctx: ReadContext, lineno: int, step: int, values: dict[str, str]) -> Event | None:
    metrics = {k: v for k, v in values.items() if to_float(v) is not None}
    if not metrics:
        ctx.problem(lineno, "metrics line carries no numeric values", ctx.file_run_id, step)
        return None
    return ctx.decode({"run_id": ctx.file_run_id, "step": step, "metrics": metrics}, lineno)


def _roll_line(ctx: ReadContext, lineno: int, raw: bytes) -> Event | None:
    ok, obj = ctx.parse_json(lineno, raw)
    if not ok:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("metrics"), dict):
        ctx.problem(
            lineno,
            f"metrics_tag without a 'metrics' object: {preview(raw)}",
            ctx.file_run_id,
        )
        return None
    # null is "no value" here, as in the frameworks' other records
    metrics = {k: v for k, v in obj["metrics"].items() if v is not None}
    return ctx.decode(
        {"run_id": ctx.file_run_id, "step": obj.get("step"), "metrics": metrics}, lineno
    )
