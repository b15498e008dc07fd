"""Console blocks: a step header line, then the step's values, one or a few per line.

Two trainers print their steps this way:

- XTuner's RL trainer (``xtuner/v1/train/rl_trainer.py``, ``_log_step``): a header
  ``[XTuner][2025-10-01 12:00:00][INFO] Train step 3/100``, then sections of
  ``- name : value`` lines under ``Train step 3 finished and timing listed:`` (values in
  seconds, ``12.34s``), ``Train step 3 data statistics:`` and ``Train step 3 throughput
  statistics:``. Each section's values are named as its experiment tracker names them:
  ``time/<name>``, ``response/<name>`` (``response/rewards/mean``), ``throughput/<name>``.
- AReaL's stats logger (``areal/utils/stats_logger.py``, ``StatsLogger.commit``), through its
  logging format (``[AReaL] 20250726-10:30:00.000 StatsLogger INFO: ...``): ``Epoch 1/5
  Step 3/40 Train step 3/200 done.``, ``Stats (1/1):``, then ``tabulate_stats`` (in
  ``areal/utils/data.py``): a ``fancy_grid`` table of four name/value pairs a row
  (``│ ppo_actor/task_reward/avg │ 5.0391e-01 │ ... │``). W&B gets the step of its
  ``Train step``; a commit of several stats dicts logs them at that step and the next ones.

A block ends at the next step header, or at a line that is neither a value, a table border
nor a label ending in a colon (another log line). Terminal colors are ignored.

>>> blocks = Blocks()
>>> [blocks.feed(line) for line in ("[XTuner][t][INFO] Train step 3/100",
...     "Train step 3 data statistics:", "- rewards/mean             : 0.5039")]
[(True, None), (True, None), (True, None)]
>>> blocks.feed("[XTuner][t][INFO] Eval: acc: 0.5")
(False, (3, {'response/rewards/mean': '0.5039'}))
"""

from __future__ import annotations

import re

__all__ = ["SNIFF", "Blocks"]

_HEADER = re.compile(
    r"(?:^|[\s\]])Train step (\d+)(?:/\d+)?(?: (done\.|data statistics:|"
    r"throughput statistics:|finished and timing listed:))?"
)
_STATS = re.compile(r"(?:^|\s)Stats \((\d+)/(\d+)\):\s*$")
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf"
_ITEM = re.compile(rf"^\s*- ([A-Za-z_][\w/@.\-]*)\s*: ({_NUMBER})s?\s*$")
_BORDER = re.compile(r"^\s*[╒╞├╘+=\-─═╤╪┼╧╕╡┤╛]+\s*$")
_ROW = "│"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # AReaL's log files keep colorlog's colors
#: the section a value line is under -> the prefix XTuner's tracker gives its names
_SECTIONS = {
    "data statistics:": "response/",
    "throughput statistics:": "throughput/",
    "finished and timing listed:": "time/",
}
#: Patterns of the start of a file that prints such blocks.
SNIFF = (
    re.compile(rb"Train step \d+ data statistics:"),
    re.compile(rb"Train step \d+/\d+ done\."),
)

Block = tuple[int, dict[str, str]]


class Blocks:
    """The steps of block-printing trainers, fed a line at a time."""

    def __init__(self) -> None:
        self.step: int | None = None
        self._base = 0
        self._prefix = ""
        self._values: dict[str, str] = {}

    def feed(self, line: str) -> tuple[bool, Block | None]:
        """Whether the line belongs to a block, and the block it closed, if any."""
        line = _ANSI.sub("", line)
        header = _HEADER.search(line)
        if header is not None:
            step = int(header.group(1))
            done = self._close() if step != self.step else None
            self.step, self._base = step, step
            self._prefix = _SECTIONS.get(header.group(2) or "", self._prefix)
            return True, done
        if self.step is None:
            return False, None
        stats = _STATS.search(line)
        if stats is not None:
            done = self._close()
            self.step = self._base + int(stats.group(1)) - 1
            return True, done
        if self._value(line) or _BORDER.match(line) or line.rstrip().endswith(":"):
            return True, None  # a value, a table's border, a label or an empty message
        done = self._close()
        self.step = None
        return False, done

    def _value(self, line: str) -> bool:
        item = _ITEM.match(line)
        if item is not None:
            self._values[self._prefix + item.group(1)] = item.group(2)
            return True
        if line.lstrip().startswith(_ROW):
            cells = [c.strip() for c in line.strip().strip(_ROW).split(_ROW)]
            for name, value in zip(cells[::2], cells[1::2], strict=False):
                if name:
                    self._values[name] = value
            return True
        return False

    def close(self) -> Block | None:
        """The block still open at the end of the log."""
        done = self._close()
        self.step = None
        return done

    def _close(self) -> Block | None:
        values, self._values = self._values, {}
        self._prefix = ""
        if self.step is None or not values:
            return None
        return self.step, values
