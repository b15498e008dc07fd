"""Which metric feeds which indicator: by preset rank, never by arrival order."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamwatch.events import Event
from streamwatch.indicators import PRESETS, Indicator, IndicatorMap
from streamwatch.monitor import Monitor
from streamwatch.sources import FileSource

FORMATS = Path(__file__).parent / "data" / "formats"
TRL_STATE = FORMATS / "trl-grpo-eval" / "checkpoint-30" / "trainer_state.json"


def bound(monitor: Monitor, run_id: str) -> dict[str, str]:
    return {ind.value: metric for ind, metric in monitor.runs[run_id].bound.items()}


def test_an_exact_name_outranks_a_glob_and_an_earlier_rule_a_later_one() -> None:
    m = IndicatorMap()
    assert m.rank("eval_reward") < m.rank("eval_rewards/accuracy_reward/mean")
    # two globs of one preset: the earlier one ranks first
    assert m.rank("val-core/gsm8k/reward/mean@1") < m.rank("val-core/gsm8k/acc/mean@1")
    assert m.lookup("perf/mfu/actor") == (None, m.unranked)


def test_aliases_outrank_every_preset() -> None:
    m = IndicatorMap(aliases={"my/*": "entropy"})
    assert m.rank("my/ent") < m.rank("actor/entropy")


@pytest.mark.parametrize("order", [1, -1])
def test_the_best_ranked_metric_of_an_event_binds_whatever_its_place(order: int) -> None:
    metrics = {"eval_frac_reward_zero_std": 0.0, "eval_reward": 0.85, "eval_loss": 0.002}
    items = dict(list(metrics.items())[::order])
    monitor = Monitor()
    monitor.process(Event(run_id="r", step=10, metrics=items))
    assert bound(monitor, "r")["heldout_reward"] == "eval_reward"


def test_a_better_ranked_metric_arriving_later_takes_the_indicator_over() -> None:
    monitor = Monitor()
    monitor.process(Event(run_id="r", step=1, metrics={"eval_rewards/acc/mean": 0.4}))
    assert bound(monitor, "r")["heldout_reward"] == "eval_rewards/acc/mean"
    monitor.process(Event(run_id="r", step=2, metrics={"eval_reward": 0.5}))
    run = monitor.runs["r"]
    assert bound(monitor, "r")["heldout_reward"] == "eval_reward"
    # the metric that lost the indicator goes on as a plain metric
    assert run.series["eval_rewards/acc/mean"].indicator is None
    assert run.series["eval_reward"].indicator is Indicator.HELDOUT_REWARD


def test_a_worse_ranked_metric_arriving_later_stays_generic() -> None:
    monitor = Monitor()
    monitor.process(Event(run_id="r", step=1, metrics={"eval_reward": 0.5}))
    monitor.process(Event(run_id="r", step=2, metrics={"eval_rewards/acc/mean": 0.4}))
    assert bound(monitor, "r")["heldout_reward"] == "eval_reward"
    assert monitor.runs["r"].series["eval_rewards/acc/mean"].indicator is None


def test_trl_trainer_state_with_eval_entries_binds_eval_reward() -> None:
    """The Trainer writes keys sorted: ``eval_frac_reward_zero_std`` comes before
    ``eval_reward`` in every eval entry, and must not feed the held-out check."""
    monitor = Monitor()
    source = FileSource(TRL_STATE)
    for event in source:
        monitor.process(event)
    assert source.format == "hf"
    assert bound(monitor, "trl-grpo-eval") == {
        "loss": "loss",
        "grad_norm": "grad_norm",
        "response_length": "completions/mean_length",
        "response_length_max": "completions/max_length",
        "response_length_min": "completions/min_length",
        "truncation_ratio": "completions/clipped_ratio",
        "train_reward": "reward",
        "reward_std": "reward_std",
        "zero_variance_groups": "frac_reward_zero_std",
        "entropy": "entropy",
        "clip_fraction": "clip_ratio/region_mean",
        "heldout_reward": "eval_reward",
    }


def test_every_preset_names_only_known_indicators_and_no_rule_twice() -> None:
    for name, rules in PRESETS.items():
        patterns = [p for p, _ in rules]
        assert len(patterns) == len(set(patterns)), name
        assert all(isinstance(ind, Indicator) for _, ind in rules)
