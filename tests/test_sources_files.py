"""Recorded-file sources: every format, detection, and every kind of bad input."""

from __future__ import annotations

import doctest
import json
import math
import re
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from streamwatch.events import Event, Problem, Source
from streamwatch.sources import (
    MAX_KEPT_PROBLEMS,
    FileSource,
    default_run_id,
    detect_format,
    read_events,
)
from streamwatch.sources import files as files_module

DATA = Path(__file__).parent / "data"
FORMATS_DIR = DATA / "formats"
REAL = sorted((DATA / "real").glob("*.jsonl"))
NAN = math.nan
INF = math.inf


def read(path: Path, **kw: Any) -> tuple[list[Event], FileSource]:
    source = FileSource(path, **kw)
    return list(source), source


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8", newline="")
    else:
        path.write_bytes(content)
    return path


def line(step: int, run_id: str = "r", **metrics: object) -> str:
    return json.dumps({"run_id": run_id, "step": step, "metrics": metrics}) + "\n"


def same(a: dict[str, float], b: dict[str, float]) -> bool:
    """Metric dicts equal, NaN equal to NaN, in the same order."""
    return list(a) == list(b) and all(
        (math.isnan(a[k]) and math.isnan(b[k])) or a[k] == b[k] for k in a
    )


def only_problem(source: FileSource) -> Problem:
    assert source.stats.problems == 1, source.problems
    return source.problems[0]


# ---------------------------------------------------------------- real data


@pytest.mark.parametrize("path", REAL, ids=[p.stem for p in REAL])
def test_real_files_read_completely(path: Path) -> None:
    events, source = read(path)
    assert source.format == "streamwatch"
    assert len(events) == 106
    assert source.stats.events == 106
    assert source.stats.problems == 0 and source.problems == []
    assert source.stats.lines == 106
    assert source.stats.bytes_read == source.size == path.stat().st_size
    assert source.stats.values == sum(len(e.metrics) for e in events)
    assert [e.step for e in events] == list(range(106))
    assert all(e.run_id.startswith("verl-async_reward_agent/") for e in events)
    assert all(name.startswith("val-") for name in events[0].metrics)  # pre-training validation
    assert all("actor/entropy" in e.metrics for e in events[1:])


def test_real_data_readme_kept() -> None:
    assert (DATA / "real" / "README.md").is_file()
    assert len(REAL) == 6


# ---------------------------------------------------------------- formats


def test_streamwatch_single_metric_lines_merge_per_process_and_step() -> None:
    events, source = read(FORMATS_DIR / "single-metric.jsonl")
    assert source.format == "streamwatch"
    assert source.stats.problems == 0
    assert [(e.step, e.source, e.tags) for e in events] == [
        (1, Source(host="node-1", rank=0), {}),
        (1, Source(host="node-1", rank=1), {}),
        (2, Source(host="node-1", rank=0), {}),
        (3, Source(host="node-1", rank=0), {"phase": "train"}),
    ]
    assert all(e.run_id == "grpo-c" for e in events)
    assert [e.ts for e in events] == [1764460800.0, 1764460800.0, 1764460810.0, 1764460820.0]
    assert same(events[0].metrics, {"actor/entropy": 0.5, "critic/score/mean": NAN})
    assert same(events[1].metrics, {"actor/entropy": 0.52})
    # NaN spelled "nan" and null; 512 is an integer
    assert same(
        events[2].metrics,
        {"actor/entropy": NAN, "critic/score/mean": NAN, "response_length/mean": 512.0},
    )
    assert same(events[3].metrics, {"actor/entropy": 0.47})
    assert (source.stats.events, source.stats.values, source.stats.lines) == (4, 7, 7)


def test_single_metric_repeated_name_starts_a_new_event(tmp_path: Path) -> None:
    rows = [
        {"run_id": "r", "step": 1, "name": "a", "value": 1},
        {"run_id": "r", "step": 1, "name": "b", "value": 2},
        {"run_id": "r", "step": 1, "name": "a", "value": 3},
    ]
    path = write(tmp_path, "r.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    events, _ = read(path)
    assert [e.metrics for e in events] == [{"a": 1.0, "b": 2.0}, {"a": 3.0}]


def test_single_metric_lines_merge_only_when_consecutive(tmp_path: Path) -> None:
    rows = [
        '{"run_id": "r", "step": 1, "name": "a", "value": 1}',
        '{"run_id": "r", "step": 1, "metrics": {"c": 5}}',
        '{"run_id": "r", "step": 1, "name": "b", "value": 2}',
        '{"run_id": "r", "step": 1, "name": "d", "value": "x"}',
        '{"run_id": "r", "step": 1, "name": "e", "value": 4}',
    ]
    path = write(tmp_path, "r.jsonl", "\n".join(rows))
    events, source = read(path)
    assert [e.metrics for e in events] == [{"a": 1.0}, {"c": 5.0}, {"b": 2.0, "e": 4.0}]
    problem = only_problem(source)
    assert problem.origin == f"{path}:4"
    assert problem.metric == "d"


def test_single_metric_group_problems_name_their_own_lines(tmp_path: Path) -> None:
    rows = [
        {"step": -1, "name": "a", "value": 1},
        {"step": -1, "name": "b", "value": 2},
        {"step": 4, "name": "a", "value": 1},
        {"step": 4, "name": "b", "value": 2},
    ]
    path = write(tmp_path, "grpo-d.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    events, source = read(path)
    assert [(e.run_id, e.step, e.metrics) for e in events] == [("grpo-d", 4, {"a": 1.0, "b": 2.0})]
    assert [p.origin for p in source.problems] == [f"{path}:1", f"{path}:2"]
    assert all("greater than or equal to 0" in p.reason for p in source.problems)
    events, _ = read(path, run_id="other")
    assert [e.run_id for e in events] == ["other"]


def test_verl_file_logger() -> None:
    events, source = read(FORMATS_DIR / "verl-grpo-demo.jsonl")
    assert source.format == "verl"
    assert source.stats.problems == 0
    assert [e.run_id for e in events] == ["verl-grpo-demo"] * 3
    assert [e.step for e in events] == [1, 2, 3]
    assert same(
        events[0].metrics,
        {"actor/entropy": 0.52, "critic/score/mean": 0.31, "response_length/mean": 412.5},
    )
    assert same(
        events[2].metrics,
        {
            "actor/entropy": NAN,
            "critic/score/mean": 0.4,
            "response_length/mean": 455.25,
            "val-core/openai/gsm8k/reward/mean@1": 0.61,
        },
    )


def test_verl_bad_lines(tmp_path: Path) -> None:
    text = (
        '{"step": 1, "data": {"a": 1}}\n'
        '{"step": 2, "metrics": {"a": 1}}\n'
        '{"step": 3, "data": [1, 2]}\n'
        '{"step": 4, "data": {"a": 4}, "extra": "ignored"}\n'
    )
    path = write(tmp_path, "v.jsonl", text)
    events, source = read(path, format="verl")
    assert [(e.run_id, e.step, e.metrics) for e in events] == [
        ("v", 1, {"a": 1.0}),
        ("v", 4, {"a": 4.0}),
    ]
    assert [(p.origin, p.run_id, p.step) for p in source.problems] == [
        (f"{path}:2", "v", 2),
        (f"{path}:3", "v", 3),
    ]
    assert "no 'data' object" in source.problems[0].reason
    assert "'metrics' must be an object" in source.problems[1].reason


def test_hf_trainer_state() -> None:
    path = FORMATS_DIR / "sft-demo" / "checkpoint-30" / "trainer_state.json"
    events, source = read(path)
    assert source.format == "hf"
    assert source.stats.problems == 0
    assert source.stats.bytes_read == source.size
    assert [e.run_id for e in events] == ["sft-demo"] * 5
    assert [e.step for e in events] == [10, 10, 20, 30, 30]
    assert same(
        events[0].metrics,
        {"epoch": 0.3333, "grad_norm": 1.25, "learning_rate": 4.5e-05, "loss": 1.9},
    )
    # the eval entry's copy of the step's epoch is not read twice (the engine would set it aside)
    assert same(
        events[1].metrics,
        {
            "eval_loss": 1.7,
            "eval_runtime": 2.5,
            "eval_samples_per_second": 40.0,
            "eval_steps_per_second": 5.0,
        },
    )
    assert same(
        events[2].metrics,
        {"epoch": 0.6667, "grad_norm": NAN, "learning_rate": 2.5e-05, "loss": 1.6, "reward": 0.42},
    )
    assert events[4].metrics["total_flos"] == 1.2e15
    assert events[4].metrics["train_loss"] == 1.63


def test_hf_run_id_from_directories(tmp_path: Path) -> None:
    doc = json.dumps({"log_history": [{"step": 1, "loss": 2.0}]})
    (tmp_path / "my-run").mkdir()
    plain = write(tmp_path / "my-run", "trainer_state.json", doc)
    assert [e.run_id for e in read(plain)[0]] == ["my-run"]
    renamed = write(tmp_path, "exported.json", doc)
    assert [e.run_id for e in read(renamed)[0]] == ["exported"]
    assert default_run_id(Path("out/sft/checkpoint-500/trainer_state.json"), "hf") == "sft"
    assert default_run_id(Path("runs/grpo-a.jsonl"), "streamwatch") == "grpo-a"


def test_hf_values_that_are_not_numbers_are_not_metrics(tmp_path: Path) -> None:
    history = [
        {"step": 1, "loss": 1.0, "note": "warmup", "flags": [1], "done": True, "eval_x": None},
        {"step": 2, "loss": "inf", "huge": 10**400},
    ]
    path = write(tmp_path, "trainer_state.json", json.dumps({"log_history": history}))
    events, source = read(path)
    assert source.stats.problems == 0
    # null is "no value" (TRL writes it for a reward function that scored nothing), not NaN
    assert same(events[0].metrics, {"loss": 1.0})
    assert same(events[1].metrics, {"loss": INF, "huge": INF})


def test_hf_bad_documents(tmp_path: Path) -> None:
    broken = write(tmp_path, "trainer_state.json", '{\n  "log_history": [\n    {"step": 1,\n')
    events, source = read(broken)
    problem = only_problem(source)
    assert events == []
    assert problem.origin.startswith(f"{broken}:")
    assert "invalid JSON" in problem.reason

    no_history = write(tmp_path, "a.json", '{"log_history": 5}')
    events, source = read(no_history, format="hf")
    assert events == [] and "no 'log_history' list" in only_problem(source).reason

    entries = json.dumps(
        {"log_history": [7, {"loss": 1.0}, {"step": 2, "note": "x"}, {"step": -1, "loss": 1.0}]}
    )
    bad_entries = write(tmp_path, "b.json", entries)
    events, source = read(bad_entries, format="hf")
    assert events == []
    assert [p.origin for p in source.problems] == [
        f"{bad_entries}:log_history[{i}]" for i in range(4)
    ]
    assert "expected an object" in source.problems[0].reason
    assert "no 'step'" in source.problems[1].reason
    assert "no numeric values" in source.problems[2].reason
    assert "step" in source.problems[3].reason and source.problems[3].run_id == "b"


def test_hf_refuses_huge_file(tmp_path: Path) -> None:
    path = tmp_path / "trainer_state.json"
    with path.open("wb") as fh:
        fh.truncate(512 * 2**20 + 1)  # sparse: no disk space used
    events, source = read(path, format="hf")
    assert events == []
    problem = only_problem(source)
    assert problem.origin == f"{path}:1"
    assert "larger than" in problem.reason and "not read" in problem.reason
    assert source.stats.bytes_read == 0


def test_hf_empty(tmp_path: Path) -> None:
    path = write(tmp_path, "trainer_state.json", "\n")
    events, source = read(path, format="hf")
    assert events == [] and only_problem(source).reason == "file is empty"


def test_wandb_chart_export_strips_run_prefix() -> None:
    events, source = read(FORMATS_DIR / "wandb-chart-export.csv")
    assert source.format == "wandb"
    assert source.stats.problems == 0
    assert [e.run_id for e in events] == ["grpo-b"] * 5
    assert [e.step for e in events] == [1, 2, 3, 4, 6]  # step 5 logged nothing
    expected: list[dict[str, float]] = [
        {"train/reward": 0.1, "train/entropy": 0.9},
        {"train/reward": 0.2},
        {"train/entropy": 0.8},
        {"train/reward": NAN, "train/entropy": INF},
        {"train/reward": NAN, "train/entropy": 0.75},
    ]
    for event, metrics in zip(events, expected, strict=True):
        assert same(event.metrics, metrics)
    assert source.stats.lines == 7


def test_wandb_history_export_with_timestamps() -> None:
    events, source = read(FORMATS_DIR / "wandb-history.csv")
    assert source.format == "wandb"
    assert source.stats.problems == 0
    assert [(e.run_id, e.step, e.ts) for e in events] == [
        ("wandb-history", 0, 1764460800.5),
        ("wandb-history", 1, 1764460813.0),
        ("wandb-history", 2, 1764460825.5),
    ]
    assert same(events[0].metrics, {"train/loss": 2.1, "train/reward": 0.1})
    assert same(events[1].metrics, {"train/loss": 1.9})
    assert same(events[2].metrics, {"train/loss": NAN, "train/reward": 0.3})


def test_wandb_mixed_prefixes_keep_names_and_file_run_id(tmp_path: Path) -> None:
    text = "Step,a - loss,b - loss,a - loss__MIN\n1,0.5,0.6,0.4\n"
    events, _ = read(write(tmp_path, "two-runs.csv", text))
    assert [(e.run_id, e.metrics) for e in events] == [
        ("two-runs", {"a - loss": 0.5, "b - loss": 0.6})
    ]


def test_wandb_longest_shared_prefix_and_run_id_override(tmp_path: Path) -> None:
    text = "Step,exp - 3 - loss,exp - 3 - kl\n1,0.5,0.01\n"
    path = write(tmp_path, "x.csv", text)
    events, _ = read(path)
    assert [(e.run_id, e.metrics) for e in events] == [("exp - 3", {"loss": 0.5, "kl": 0.01})]
    events, _ = read(path, run_id="mine")
    assert [(e.run_id, e.metrics) for e in events] == [("mine", {"loss": 0.5, "kl": 0.01})]


def test_wandb_step_column_preference(tmp_path: Path) -> None:
    # the trainer's step, not W&B's count of log calls
    text = "train/global_step,_step,loss\n100,1,0.5\n200,2.0,0.4\n"
    events, _ = read(write(tmp_path, "s.csv", text))
    assert [(e.step, e.metrics) for e in events] == [(100, {"loss": 0.5}), (200, {"loss": 0.4})]
    events, _ = read(write(tmp_path, "g.csv", "train/global_step,loss\n100,0.5\n"))
    assert [(e.step, e.metrics) for e in events] == [(100, {"loss": 0.5})]


def test_wandb_bad_rows(tmp_path: Path) -> None:
    text = (
        "_step,_timestamp,loss,reward\n"
        "1,1764460800,0.5,0.1\n"  # good
        "2,1764460801,0.4\n"  # short row
        "abc,1764460802,0.3,0.2\n"  # bad step
        ",1764460803,0.3,0.2\n"  # empty step
        "5,1764460804,oops,0.2\n"  # bad value: event kept without it
        "6,soon,0.2,0.2\n"  # bad time: event kept without it
        "-7,1764460806,0.2,0.2\n"  # negative step
    )
    path = write(tmp_path, "bad.csv", text)
    events, source = read(path)
    assert [(e.step, e.ts, e.metrics) for e in events] == [
        (1, 1764460800.0, {"loss": 0.5, "reward": 0.1}),
        (5, 1764460804.0, {"reward": 0.2}),
        (6, None, {"loss": 0.2, "reward": 0.2}),
    ]
    origins = [p.origin for p in source.problems]
    assert origins == [f"{path}:{n}" for n in (3, 4, 5, 6, 7, 8)]
    reasons = [p.reason for p in source.problems]
    assert "row has 3 cells, the header has 4" in reasons[0]
    assert "step" in reasons[1] and "'abc'" in reasons[1]
    assert "step cell is empty" in reasons[2]
    assert reasons[3] == "metric 'loss' value 'oops' is not a number"
    assert source.problems[3].step == 5 and source.problems[3].metric == "loss"
    assert "'soon'" in reasons[4]
    assert "greater than or equal to 0" in reasons[5]
    assert all(p.run_id == "bad" for p in source.problems)


def test_wandb_without_step_column_reads_nothing(tmp_path: Path) -> None:
    path = write(tmp_path, "n.csv", "epoch,loss\n1,0.5\n")
    events, source = read(path, format="wandb")
    assert events == []
    problem = only_problem(source)
    assert problem.origin == f"{path}:1" and "no step column" in problem.reason


def test_wandb_invalid_utf8_row(tmp_path: Path) -> None:
    path = write(tmp_path, "u.csv", b"Step,loss\n1,0.5\n2,\xff\xfe\n3,0.3\n")
    events, source = read(path)
    assert [e.step for e in events] == [1, 3]
    problem = only_problem(source)
    assert problem.origin == f"{path}:3" and "invalid UTF-8" in problem.reason


# ---------------------------------------------------------------- detection and options


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        ("verl-grpo-demo.jsonl", "verl"),
        ("single-metric.jsonl", "streamwatch"),
        ("sft-demo/checkpoint-30/trainer_state.json", "hf"),
        ("wandb-chart-export.csv", "wandb"),
        ("wandb-history.csv", "wandb"),
    ],
)
def test_detect_format(relative: str, expected: str) -> None:
    assert detect_format(FORMATS_DIR / relative) == expected


def test_detect_real_and_edge_content(tmp_path: Path) -> None:
    assert detect_format(REAL[0]) == "streamwatch"
    assert detect_format(write(tmp_path, "empty.jsonl", "")) == "streamwatch"
    one_line_hf = write(tmp_path, "state.json", '{"log_history": []}')
    assert detect_format(one_line_hf) == "hf"
    # the first line cannot be parsed: judged by the keys it shows
    assert detect_format(write(tmp_path, "c.jsonl", '{"step": 1, "metrics": {"a": \n')) == (
        "streamwatch"
    )
    assert detect_format(write(tmp_path, "v.jsonl", '{"step": 1, "data": {"a": \n')) == "verl"
    bom_csv = write(tmp_path, "b.csv", "\ufeffStep,loss\r\n1,0.5\r\n")
    assert detect_format(bom_csv) == "wandb"


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"\x00\x01\x02binary", "starts with"),
        (b"just some text\n", "starts with"),
        (b'{"foo": 1}\n{"bar": 2}\n', "not a metrics log (JSON objects without 'metrics'"),
        (b'{\n  "config": 1\n}\n', "without 'log_history'"),
        (b"[1, 2, 3]\n", "starts with"),
    ],
)
def test_detect_unknown_content_names_the_file(tmp_path: Path, content: bytes, why: str) -> None:
    path = write(tmp_path, "mystery.dat", content)
    verdict = "not a metrics log" if content.startswith(b"{") else "unknown file format"
    with pytest.raises(ValueError, match=verdict) as info:
        detect_format(path)
    assert str(path) in str(info.value) and why in str(info.value)
    with pytest.raises(ValueError, match=verdict):
        FileSource(path)


@pytest.mark.parametrize("indent", [None, 2])
def test_an_npm_package_json_is_not_a_metrics_log(tmp_path: Path, indent: int | None) -> None:
    package = {"name": "web", "version": "1.0.0", "scripts": {"test": "jest"}}
    path = write(tmp_path, "package.json", json.dumps(package, indent=indent) + "\n")
    with pytest.raises(ValueError, match="not a metrics log") as info:
        detect_format(path)
    assert str(path) in str(info.value)
    log = write(tmp_path, "run.jsonl", '{"step": 1, "metrics": {"actor/entropy": 0.3}}\n')
    skipped: list[tuple[Path, str]] = []
    assert files_module.expand_paths([tmp_path], skipped) == [log]
    assert [(p, "not a metrics log" in why) for p, why in skipped] == [(path, True)]
    # one value per line, streamwatch's other shape, is still a log
    value = write(tmp_path, "v.jsonl", '{"run_id": "r", "step": 1, "name": "kl", "value": 0.1}\n')
    assert detect_format(value) == "streamwatch"


def test_format_override(tmp_path: Path) -> None:
    verl = FORMATS_DIR / "verl-grpo-demo.jsonl"
    events, source = read(verl, format="streamwatch")
    assert source.format == "streamwatch"
    assert events == []
    assert source.stats.problems == 3
    assert all("no 'metrics' object" in p.reason for p in source.problems)
    # a CSV with an unusual name is still read when told what it is
    events, source = read(write(tmp_path, "log.txt", "Step,loss\n1,0.5\n"), format="wandb")
    assert [e.metrics for e in events] == [{"loss": 0.5}]
    with pytest.raises(ValueError, match="unknown format 'tensorflow'"):
        FileSource(verl, format="tensorflow")


def test_run_id_from_data_name_and_override(tmp_path: Path) -> None:
    text = '{"step": 1, "metrics": {"a": 1}}\n{"run_id": "named", "step": 2, "metrics": {"a": 2}}\n'
    path = write(tmp_path, "grpo-a.jsonl", text)
    assert [e.run_id for e in read(path)[0]] == ["grpo-a", "named"]
    assert [e.run_id for e in read(path, run_id="forced")[0]] == ["forced", "forced"]
    verl = FORMATS_DIR / "verl-grpo-demo.jsonl"
    assert {e.run_id for e in read(verl, run_id="v2")[0]} == {"v2"}


def test_missing_file_and_directory(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        FileSource(missing)
    with pytest.raises(IsADirectoryError):
        FileSource(tmp_path)
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        read_events([REAL[0], missing])  # raised before any event is read


def test_read_events_chains_files() -> None:
    seen: list[Problem] = []
    events = list(read_events(REAL[:2], on_problem=seen.append))
    assert len(events) == 212
    assert seen == []
    assert events[105].run_id != events[106].run_id
    assert [e.step for e in events[:2]] == [0, 1] and events[106].step == 0


def test_on_problem_receives_everything(tmp_path: Path) -> None:
    path = write(tmp_path, "p.jsonl", "x\n" + line(1, a=1) + "y\n")
    seen: list[Problem] = []
    events, source = read(path, on_problem=seen.append)
    assert len(events) == 1
    assert [p.origin for p in seen] == [f"{path}:1", f"{path}:3"]
    assert source.problems == [] and source.stats.problems == 2


def test_kept_problems_are_capped_but_all_counted(tmp_path: Path) -> None:
    path = write(tmp_path, "many.jsonl", line(1, a=1) + "}\n" * (MAX_KEPT_PROBLEMS + 5))
    events, source = read(path)
    assert len(events) == 1
    assert len(source.problems) == MAX_KEPT_PROBLEMS
    assert source.stats.problems == MAX_KEPT_PROBLEMS + 5


def test_stats_advance_while_reading_and_restart(tmp_path: Path) -> None:
    path = write(tmp_path, "s.jsonl", "".join(line(i, a=i, b=i) for i in range(5000)))
    source = FileSource(path)
    stats = source.stats
    iterator = iter(source)
    next(iterator)
    assert 0 < stats.bytes_read < source.size
    assert stats.events == 1
    rest = list(iterator)
    assert len(rest) == 4999
    assert (stats.events, stats.values, stats.lines) == (5000, 10000, 5000)
    assert stats.bytes_read == source.size
    assert len(list(source)) == 5000 and source.stats is stats and stats.events == 5000


def test_module_examples() -> None:
    result = doctest.testmod(files_module)
    assert result.attempted > 0 and result.failed == 0


# ---------------------------------------------------------------- bad input (streamwatch JSONL)


def test_truncated_line(tmp_path: Path) -> None:
    text = line(1, a=1) + '{"run_id": "r", "step": 2, "metrics": {"a": 0.' + "\n" + line(3, a=3)
    path = write(tmp_path, "t.jsonl", text)
    events, source = read(path)
    assert [e.step for e in events] == [1, 3]
    problem = only_problem(source)
    assert problem.origin == f"{path}:2"
    assert "cut short" in problem.reason and '{"run_id": "r"' in problem.reason


@pytest.mark.parametrize(
    "cut", ['{"run_id": "r", "step": 2, "metrics": {"lo', '{"run_id": "r", "st']
)
def test_a_line_cut_inside_a_string_says_so(tmp_path: Path, cut: str) -> None:
    path = write(tmp_path, "t.jsonl", line(1, a=1) + cut + "\n" + line(3, a=3))
    _, source = read(path)
    reason = only_problem(source).reason
    assert "cut short" in reason and "at at" not in reason and "control character" not in reason


def test_problems_are_counted_per_line_and_blank_lines_are_counted(tmp_path: Path) -> None:
    bad = json.dumps({"run_id": "r", "step": 2, "metrics": {"a": "x", "b": "y", "c": [1]}})
    path = write(tmp_path, "t.jsonl", line(1, a=1) + "\n  \n" + bad + "\n" + line(3, a=3))
    _, source = read(path)
    assert source.stats.problems == 3 and source.stats.bad_lines == 1
    assert source.stats.blank_lines == 2


def test_truncated_last_line_without_newline(tmp_path: Path) -> None:
    path = write(tmp_path, "t.jsonl", line(1, a=1) + '{"run_id": "r", "st')
    events, source = read(path)
    assert len(events) == 1
    assert only_problem(source).origin == f"{path}:2"


def test_wrong_types(tmp_path: Path) -> None:
    text = (
        '{"run_id": "r", "step": "abc", "metrics": {"a": 1}}\n'
        '{"run_id": "r", "step": 2, "metrics": [1, 2]}\n'
        '{"run_id": "r", "step": 3, "metrics": {"a": 1, "b": "high", "c": [1]}}\n'
        '{"run_id": 5, "step": 4, "metrics": {"a": 1}}\n'
        "[1, 2]\n"
        "null\n"
        "42\n"
    )
    path = write(tmp_path, "w.jsonl", text)
    events, source = read(path)
    assert [(e.step, e.metrics) for e in events] == [(3, {"a": 1.0})]
    origins = [p.origin for p in source.problems]
    assert origins == [f"{path}:{n}" for n in (1, 2, 3, 3, 4, 5, 6, 7)]
    reasons = [p.reason for p in source.problems]
    assert "step" in reasons[0] and "'abc'" in reasons[0]
    assert reasons[1] == "'metrics' must be an object, got [1, 2]"
    assert reasons[2] == "metric 'b' value 'high' is not a number"
    assert str(source.problems[2]) == f"{path}:3, run 'r', step 3: {reasons[2]}"
    assert source.problems[3].metric == "c"
    assert "run_id" in reasons[4]
    assert reasons[5:] == ["expected a JSON object, got list"] + [
        f"expected a JSON object, got {t}" for t in ("NoneType", "int")
    ]


def test_a_bad_time_loses_the_time_not_the_event(tmp_path: Path) -> None:
    text = (
        '{"run_id": "r", "step": 1, "ts": "yesterday", "metrics": {"a": 1}}\n'
        '{"run_id": "r", "step": 2, "ts": NaN, "metrics": {"a": 2}}\n'
        '{"run_id": "r", "step": 3, "ts": 1700000000.5, "metrics": {"a": 3}}\n'
    )
    path = write(tmp_path, "t.jsonl", text)
    events, source = read(path)
    assert [(e.step, e.ts, e.metrics) for e in events] == [
        (1, None, {"a": 1.0}),
        (2, None, {"a": 2.0}),
        (3, 1700000000.5, {"a": 3.0}),
    ]
    assert [str(p) for p in source.problems] == [
        f"{path}:1, run 'r', step 1: 'ts' 'yesterday' is not a time in seconds; the event is "
        "kept without it",
        f"{path}:2, run 'r', step 2: 'ts' nan is not a time in seconds; the event is kept "
        "without it",
    ]


def test_a_single_metric_without_a_value_is_set_aside(tmp_path: Path) -> None:
    text = (
        '{"run_id": "r", "step": 1, "name": "loss"}\n'
        '{"run_id": "r", "step": 1, "name": "kl", "value": 0.1}\n'
    )
    path = write(tmp_path, "v.jsonl", text)
    events, source = read(path)
    assert [(e.step, e.metrics) for e in events] == [(1, {"kl": 0.1})]
    assert [str(p) for p in source.problems] == [
        f"{path}:1, run 'r', step 1: metric 'loss' has no 'value'"
    ]


def test_unknown_fields_are_ignored(tmp_path: Path) -> None:
    text = '{"run_id": "r", "step": 1, "metrics": {"a": 1}, "host_info": {"x": 1}, "v": 2}\n'
    events, source = read(write(tmp_path, "u.jsonl", text))
    assert [(e.run_id, e.step, e.metrics) for e in events] == [("r", 1, {"a": 1.0})]
    assert source.stats.problems == 0


def test_negative_repeated_and_decreasing_steps(tmp_path: Path) -> None:
    text = line(5, a=1) + line(-1, a=2) + line(5, a=3) + line(2, a=4)
    path = write(tmp_path, "n.jsonl", text)
    events, source = read(path)
    assert [e.step for e in events] == [5, 5, 2]
    problem = only_problem(source)
    assert problem.origin == f"{path}:2"
    assert "greater than or equal to 0" in problem.reason and "-1" in problem.reason


def test_huge_numbers_are_non_finite_values(tmp_path: Path) -> None:
    text = (
        '{"run_id": "r", "step": 1, "metrics": {"a": 1e999, "b": -1e999}}\n'
        + '{"run_id": "r", "step": 2, "metrics": {"a": '
        + "9" * 400
        + ', "b": -'
        + "9" * 400
        + "}}\n"
        + '{"run_id": "r", "step": 3, "metrics": {"a": NaN, "b": Infinity, "c": -Infinity}}\n'
        + '{"run_id": "r", "step": 4, "metrics": {"a": "nan", "b": "inf", "c": null}}\n'
    )
    events, source = read(write(tmp_path, "h.jsonl", text))
    assert source.stats.problems == 0
    assert [e.metrics for e in events[:2]] == [{"a": INF, "b": -INF}] * 2
    assert same(events[2].metrics, {"a": NAN, "b": INF, "c": -INF})
    assert same(events[3].metrics, {"a": NAN, "b": INF, "c": NAN})


def test_unreadable_numbers_and_nesting(tmp_path: Path) -> None:
    text = (
        '{"run_id": "r", "step": 1, "metrics": {"a": ' + "9" * 5000 + "}}\n"
        '{"run_id": "r", "step": 2, "metrics": {"a": ' + "[" * 100_000 + "\n" + line(3, a=3)
    )
    path = write(tmp_path, "x.jsonl", text)
    events, source = read(path)
    assert [e.step for e in events] == [3]
    assert [p.origin for p in source.problems] == [f"{path}:1", f"{path}:2"]
    assert all("JSON" in p.reason for p in source.problems)


@pytest.mark.parametrize("content", ["", "\n\n  \n\r\n", "\ufeff"])
def test_empty_file(tmp_path: Path, content: str) -> None:
    path = write(tmp_path, "e.jsonl", content)
    events, source = read(path)
    assert events == []
    problem = only_problem(source)
    assert problem.origin == f"{path}:1" and problem.reason == "file is empty"


def test_blank_lines_bom_and_windows_line_endings(tmp_path: Path) -> None:
    text = "\ufeff" + line(1, a=1) + "\n   \n" + line(2, a=2).replace("\n", "\r\n") + "\r\n"
    path = write(tmp_path, "b.jsonl", text)
    events, source = read(path)
    assert [(e.step, e.metrics) for e in events] == [(1, {"a": 1.0}), (2, {"a": 2.0})]
    assert source.stats.problems == 0
    assert source.stats.lines == 5


def test_invalid_utf8(tmp_path: Path) -> None:
    bad = b'{"run_id": "r", "step": 2, "metrics": {"caf\xe9": 1}}\n'
    path = write(tmp_path, "i.jsonl", line(1, a=1).encode() + bad + line(3, a=3).encode())
    events, source = read(path)
    assert [e.step for e in events] == [1, 3]
    problem = only_problem(source)
    assert problem.origin == f"{path}:2" and "invalid UTF-8" in problem.reason


def test_line_over_the_limit(tmp_path: Path) -> None:
    long_line = line(2, a="x" * 500)
    path = write(tmp_path, "l.jsonl", line(1, a=1) + long_line + line(3, a=3))
    events, source = read(path, max_line_bytes=200)
    assert [e.step for e in events] == [1, 3]
    problem = only_problem(source)
    assert problem.origin == f"{path}:2"
    assert f"line is {len(long_line) - 1:,} bytes" in problem.reason
    assert "limit of 200 bytes" in problem.reason
    assert source.stats.bytes_read == source.size


def test_long_first_line_still_detected(tmp_path: Path) -> None:
    text = line(1, a="y" * 200_000) + line(2, a=2)
    events, source = read(write(tmp_path, "f.jsonl", text), max_line_bytes=1000)
    assert source.format == "streamwatch"
    assert [e.step for e in events] == [2]
    assert "200,0" in only_problem(source).reason


def test_50_mb_line_is_skipped_without_holding_it(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    size = 50 * 2**20
    with path.open("w", encoding="utf-8") as fh:
        fh.write(line(1, a=1.5))
        head, tail = '{"run_id": "r", "step": 2, "metrics": {"a": "', '"}}'
        fh.write(head)
        chunk = "z" * 2**20
        for _ in range(size // len(chunk)):
            fh.write(chunk)
        fh.write(tail + "\n")
        fh.write(line(3, a=3.5))
        fh.write(line(4, a=4.5))
    tracemalloc.start()
    try:
        events, source = read(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [(e.step, e.metrics) for e in events] == [
        (1, {"a": 1.5}),
        (3, {"a": 3.5}),
        (4, {"a": 4.5}),
    ]
    problem = only_problem(source)
    assert problem.origin == f"{path}:2"
    assert "longer than the limit of 16,777,216 bytes" in problem.reason
    assert f"line is {len(head) + size + len(tail):,} bytes" in problem.reason
    assert peak < 40 * 2**20
    assert source.stats.lines == 4 and source.stats.bytes_read == source.size


# ---------------------------------------------------------------- flat JSONL, console, TensorBoard


def test_flat_jsonl_steps_times_and_what_is_not_a_metric(tmp_path: Path) -> None:
    rows = [
        {"global_step/max_steps": "10/560", "loss": 0.5, "percentage": "1.79%", "x": None},
        {"global_step/max_steps": "20/560", "loss": "nan", "elapsed_time": "15m 49s"},
        {"step": 3, "time": 1753500620.5, "loss/mean": 0.1},
        {"_step": 4, "_runtime": 12.0, "loss": 0.2},
        {"loss": 0.3},
        {"step": "three", "loss": 0.3},
        {"step": 5, "note": "text only"},
    ]
    path = write(tmp_path, "logging.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    events, source = read(path, format="flat")
    assert [(e.step, e.ts) for e in events] == [
        (10, None),
        (20, None),
        (3, 1753500620.5),
        (4, None),
    ]
    assert same(events[0].metrics, {"loss": 0.5})
    assert same(events[1].metrics, {"loss": NAN})
    assert same(events[2].metrics, {"loss/mean": 0.1})
    assert same(events[3].metrics, {"loss": 0.2})
    reasons = [p.reason for p in source.problems]
    assert reasons == [
        "no step (expected one of step, global_step, train/global_step, trainer/global_step,"
        " global_step/max_steps, _step, iteration, system/step, grpo_step, iter, batch,"
        " episode)",
        "'step' value 'three' is not a step",
        "line carries no numeric values",
    ]
    assert [p.origin.rsplit(":", 1)[1] for p in source.problems] == ["5", "6", "7"]
    assert events[0].run_id == tmp_path.name  # logging.jsonl: named after its directory


def test_flat_jsonl_nested_by_group_reads_as_verl_names() -> None:
    """EasyR1's experiment_log.jsonl nests its metrics (real rows: tests/data/real/runs.toml)."""
    path = (
        DATA
        / "real"
        / "runs"
        / "easyr1-grpo-geometry3k-vl3b"
        / "experiment_log_before_resume_step160.jsonl"
    )
    events, source = read(path)
    assert source.format == "flat" and not source.problems
    assert [e.step for e in events] == list(range(161))
    assert same(
        events[0].metrics,
        {
            "val/reward_score": 0.020798668265342712,
            "val/overall_reward": 0.020798668885191347,
            "val/format_reward": 0.0033277870216306157,
            "val/accuracy_reward": 0.03826955074875208,
            "val_response_length/mean": 368.9788159822163,
            "val_response_length/max": 512.0,
            "val_response_length/min": 77.47368421052632,
            "val_response_length/clip_ratio": 0.2771710533844797,
            "val_prompt_length/mean": 467.5858555843956,
            "val_prompt_length/max": 638.1578947368421,
            "val_prompt_length/min": 429.89473684210526,
            "val_prompt_length/clip_ratio": 0.0,
        },
    )
    step1 = events[1].metrics
    assert step1["critic/score/mean"] == 0.01953125
    assert step1["actor/kl_loss"] == 0.00043655536137521267
    assert step1["response_length/clip_ratio"] == 0.2734375
    assert step1["reward/accuracy"] == 0.0078125


def test_flat_jsonl_step_under_roll_name() -> None:
    """ROLL's per-step records name their step system/step (real rows: runs.toml)."""
    path = DATA / "real" / "runs" / "roll-grpo-rubric-ifeval-qwen3-4b" / "metrics.jsonl"
    events, source = read(path)
    assert source.format == "flat" and not source.problems
    assert [e.step for e in events] == list(range(1, 431))
    assert events[0].metrics["reward/hard_pass_rate"] == 0.4140625
    assert events[0].metrics["actor/pg_loss"] == 2.270098775625229e-09
    assert "system/step" not in events[0].metrics


def test_flat_jsonl_records_of_several_kinds_are_named_by_their_type() -> None:
    """A GRPO loop that writes eval, rollout and train records at one step, told apart by
    their "type" (real rows: runs.toml, CS336 assignment 5)."""
    run = DATA / "real" / "runs" / "cs336-grpo-gsm8k-qwen2.5-math-1.5b-lr4e-5"
    events, source = read(run / "metrics.jsonl")
    assert source.format == "flat" and not source.problems
    assert sorted({e.step for e in events}) == list(range(201))
    first_eval, rollout, train = events[0], events[1], events[2]
    assert first_eval.step == 0 and first_eval.metrics["eval/answer_accuracy"] == 0.0380859375
    assert first_eval.metrics["eval/reward"] == 0.0380859375
    assert rollout.step == train.step == 1
    assert rollout.metrics["rollout/reward"] == 0.015625
    assert rollout.metrics["rollout/std_reward"] == 0.12426253408193588
    assert rollout.metrics["rollout/avg_response_token_length"] == 304.609375
    assert train.metrics["train/grad_norm"] == 0.263671875
    assert train.metrics["train/token_entropy"] == 0.923675537109375
    assert "train/clip_fraction" not in train.metrics  # null: no value
    assert all("rollout/grpo_step" not in e.metrics for e in events)  # the step, not a metric
    last_eval = [e for e in events if "eval/answer_accuracy" in e.metrics][-1]
    assert last_eval.step == 200 and last_eval.metrics["eval/answer_accuracy"] == 0.8818359375


def test_flat_jsonl_is_detected(tmp_path: Path) -> None:
    path = write(tmp_path, "metrics.jsonl", json.dumps({"step": 1, "time": 1.0, "a": 1}) + "\n")
    assert detect_format(path) == "flat"


def test_console_lines_of_each_framework(tmp_path: Path) -> None:
    text = (
        "2025-07-26 INFO starting\n"
        "(TaskRunner pid=7) step:1 - actor/entropy:0.5 - perf/mfu:np.float64(0.25) - x:abc\n"
        "[2025] [tracking.py (161)] [INFO] "
        'metrics_tag: {"step": 2, "metrics": {"a": 1.5, "b": null}}\n'
        "{'loss': 0.1, 'grad_norm': nan, 'note': 'x', 'epoch': 0.1}\n"
        "{'loss': 0.2, 'epoch': 0.2}\n"
        '[2025] metrics_tag: {"step": 3, "metrics": {"a": 1.5\n'
    )
    path = write(tmp_path, "train.log", text)
    assert detect_format(path) == "console"
    events, source = read(path)
    assert [e.step for e in events] == [1, 2, 1, 2]  # no progress bar: the dicts' order
    assert same(events[0].metrics, {"actor/entropy": 0.5, "perf/mfu": 0.25})
    assert same(events[1].metrics, {"a": 1.5})  # ROLL's null: no value
    assert same(events[2].metrics, {"loss": 0.1, "grad_norm": NAN, "epoch": 0.1})
    problem = only_problem(source)
    assert problem.origin.endswith(":6") and "cut short" in problem.reason


def test_a_printed_dict_log_starting_at_its_first_line_is_console(tmp_path: Path) -> None:
    path = write(tmp_path, "out.txt", "{'loss': 0.1, 'epoch': 0.1}\n{'loss': 0.2, 'epoch': 0.2}\n")
    assert detect_format(path) == "console"
    events, _ = read(path)
    assert [e.step for e in events] == [1, 2]


def test_quoted_dicts_printed_after_the_finished_bar_are_counted() -> None:
    """Recent transformers quote each value; with stdout buffered, the dicts come after the
    bar has ended (real rows: runs.toml, a 200-step run logging every step)."""
    run = DATA / "real" / "runs" / "trl-grpo-gsm8k-qwen3.5-9b-rho1.00_seed42"
    events, source = read(run / "gate2_rho1.00_seed42.log")
    assert source.format == "console" and not source.problems
    assert [e.step for e in events] == [*range(1, 201), 200]  # the closing summary: at 200
    assert same(
        events[2].metrics,
        {
            "loss": 9.825e-06,
            "grad_norm": 0.2334,
            "learning_rate": 2e-05,
            "completion_length": 244.5,
            "rewards/reward_fn": 0.375,
            "reward": 0.375,
            "reward_std": 0.1768,
            "kl": 0.0002458,
            "epoch": 0.001606,
        },
    )
    assert events[199].metrics["reward"] == 0.625 and events[199].metrics["epoch"] == 0.107
    assert events[200].metrics["train_runtime"] == 6702.0
    # the sentence "Updated tokens: {'eos_token_id': ...}." before training is no record
    assert all("eos_token_id" not in e.metrics for e in events)


def test_a_dict_inside_a_sentence_is_no_record() -> None:
    """verl prints its batch's meta info as a dict after a label (real log: runs.toml)."""
    path = DATA / "real" / "runs" / "verl-ppo-gsm8k-dstack" / "verl_demo.log"
    assert "test_gen_batch meta info: {'eos_token_id'" in path.read_text(encoding="utf-8")
    events, _ = read(path)
    assert all("eos_token_id" not in e.metrics for e in events)
    assert min(e.step for e in events) == 101  # the log's first step:N line


def test_a_tensorboard_file_cut_short_is_read_up_to_the_cut(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    real = next((FORMATS_DIR / "tensorboard" / "q3b_fsdp_base").iterdir())
    cut = tmp_path / "run" / real.name
    cut.parent.mkdir()
    cut.write_bytes(real.read_bytes()[:200_000])
    events, source = read(cut)
    whole, _ = read(real)
    assert source.format == "tensorboard" and source.problems == []
    assert 0 < len(events) < len(whole)
    assert [e.step for e in events] == [e.step for e in whole][: len(events)]
    assert events[0].run_id == "run"


def test_random_bytes_named_as_an_event_file_are_a_problem(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    path = write(tmp_path, "events.out.tfevents.1.host", bytes(range(256)) * 2)
    events, source = read(path)
    assert events == [] and "no TensorBoard records" in only_problem(source).reason


def test_a_wandb_run_log_without_the_extra_names_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A W&B transaction log is known by its header; without the ``wandb`` package the
    error names the extra to install."""
    path = write(tmp_path, "run-abc123.wandb", b":W&B\xe1\xbe\x00")
    assert detect_format(path) == "wandb-run"
    monkeypatch.setattr(files_module, "wandb_available", lambda: False)
    with pytest.raises(ValueError, match=r"W&B run's log: install the extra: pip install"):
        FileSource(path)
