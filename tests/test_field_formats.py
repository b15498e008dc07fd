"""More of the field's own outputs, each written in its framework's logging shape with the
real verl run's values: a Hugging Face ``log_history`` saved as a bare JSON list, flat JSONL
stepped by ``iteration``/``iter``/``batch``/``episode`` with nested groups, XTuner's RL trainer
console blocks and AReaL's stats logger tables."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from framework_writers import real_rows, write_areal_console, write_xtuner_console

from streamwatch.sources import FileSource, detect_format

#: TRL's names for the quantities the real run logs
TRL = {"entropy": "entropy", "reward": "reward", "length": "completions/mean_length"}


def test_a_bare_log_history_list_reads_as_the_trainer_state(tmp_path: Path) -> None:
    """``json.dump(trainer.state.log_history, f)``: a list of dicts with ``step``."""
    rows = real_rows(TRL)
    history = [{"step": s, "epoch": s / 100, **v} for s, _, v in rows]
    path = tmp_path / "log_history.json"
    with open(path, "w", encoding="utf-8") as f:
        json.dump(history, f)
    assert detect_format(path) == "hf"
    source = FileSource(path)
    events = list(source)
    assert [e.step for e in events] == [s for s, _, _ in rows]
    assert {e.run_id for e in events} == {"log_history"} and not source.problems
    assert events[0].metrics["reward"] == pytest.approx(rows[0][2]["reward"])


@pytest.mark.parametrize("key", ["iteration", "iter", "batch", "episode"])
def test_flat_jsonl_stepped_by_a_counter_with_nested_groups(key: str, tmp_path: Path) -> None:
    """``{"iteration": 3, "rewards": {"mean": 0.5}}`` -> step 3, ``rewards/mean``."""
    rows = real_rows({"reward": "mean", "entropy": "entropy"})
    lines = [
        {key: s, "rewards": {"mean": v["mean"]}, "actor": {"entropy": v["entropy"]}}
        for s, _, v in rows
    ]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(obj) + "\n" for obj in lines), encoding="utf-8")
    assert detect_format(path) == "flat"
    source = FileSource(path)
    events = list(source)
    assert [e.step for e in events] == [s for s, _, _ in rows] and not source.problems
    assert set(events[0].metrics) == {"rewards/mean", "actor/entropy"}
    assert source.stats.step_source == repr(key)


def test_xtuner_rl_trainer_console_blocks(tmp_path: Path) -> None:
    """Each ``Train step N`` block is one event of its timing, data and throughput values,
    named as XTuner's tracker names them; the ``Eval:`` line between steps ends a block."""
    rows = real_rows({"reward": "rewards/mean", "length": "response_len/mean"})
    path = write_xtuner_console(tmp_path / "rl_train.log", rows)
    assert detect_format(path) == "console"
    source = FileSource(path)
    events = list(source)
    assert [e.step for e in events] == [s for s, _, _ in rows] and not source.problems
    first = events[0].metrics
    assert first["response/rewards/mean"] == pytest.approx(rows[0][2]["rewards/mean"], abs=1e-4)
    assert first["time/generation"] == 40.5 and first["throughput/effective_tgs"] == 1234.5


def test_areal_stats_logger_tables(tmp_path: Path) -> None:
    """``Train step G/T done.``, ``Stats (1/1):`` and its ``fancy_grid`` table (four pairs a
    row, ``.4e``): one event per step, every name of the table."""
    names = {"reward": "ppo_actor/task_reward/avg", "entropy": "ppo_actor/entropy/avg"}
    names |= {"length": "ppo_actor/seq_len/avg", "kl": "ppo_actor/update/kl/avg"}
    names |= {"grad_norm": "ppo_actor/update/grad_norm", "clip": "ppo_actor/update/clip_ratio"}
    rows = real_rows(names)
    path = write_areal_console(tmp_path / "main.log", rows)
    assert detect_format(path) == "console"
    source = FileSource(path)
    events = list(source)
    assert [e.step for e in events] == [s for s, _, _ in rows] and not source.problems
    for event, (_, _, values) in zip(events, rows, strict=True):
        assert set(event.metrics) == set(values)
        reward = values["ppo_actor/task_reward/avg"]
        assert event.metrics["ppo_actor/task_reward/avg"] == pytest.approx(reward, rel=1e-3)
