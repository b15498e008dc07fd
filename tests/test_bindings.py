"""Which metric feeds which indicator: by preset rank, never by arrival order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamwatch.engine.indicators import PRESETS, Indicator, IndicatorMap
from streamwatch.engine.monitor import Monitor
from streamwatch.events import Event
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


def test_a_metric_that_loses_its_indicator_mid_event_feeds_its_new_series() -> None:
    # two events of the same metrics: the second finds their series by their places; a third
    # brings, before them, the better-ranked metric that takes the indicator over
    monitor = Monitor()
    for step in (1, 2):
        monitor.process(
            Event(run_id="r", step=step, metrics={"loss": 1.0, "eval_rewards/acc/mean": 0.4})
        )
    monitor.process(
        Event(
            run_id="r",
            step=3,
            metrics={"eval_reward": 0.5, "loss": 1.0, "eval_rewards/acc/mean": 0.4},
        )
    )
    series = monitor.runs["r"].series
    assert bound(monitor, "r")["heldout_reward"] == "eval_reward"
    assert series["eval_rewards/acc/mean"].indicator is None
    assert series["eval_rewards/acc/mean"].judged == 3  # the value of step 3 reached it
    monitor.process(Event(run_id="r", step=4, metrics={"loss": 1.0, "eval_rewards/acc/mean": 0.4}))
    assert [series[m].judged for m in ("loss", "eval_rewards/acc/mean", "eval_reward")] == [4, 4, 3]


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


# -- names no preset knows: bound by their words, after every rule ---------------------------


def test_a_name_no_rule_knows_is_bound_by_its_words_after_every_rule() -> None:
    m = IndicatorMap()
    assert m.resolve("mean_reward") is Indicator.TRAIN_REWARD
    assert m.pattern("mean_reward") == "reward"
    assert m.pattern("reward") is None  # TRL's own name: a preset rule
    # after every preset rule, before nothing
    assert max(m.rank(n) for n in ("reward", "critic/score/mean", "val-core/x/reward/mean@1")) < (
        m.rank("mean_reward")
    )
    assert m.rank("mean_reward") < m.unranked
    # the closer name first: fewer words beside the rule's own
    assert m.rank("Total rewards mean") < m.rank("r1_accuracy_reward_func mean")
    assert IndicatorMap(patterns=False).lookup("mean_reward") == (None, IndicatorMap().unranked)


@pytest.mark.parametrize(
    ("name", "indicator"),
    [
        ("mean_reward", "train_reward"),
        ("Total rewards std", "reward_std"),
        ("Grouped rewards std", "reward_std"),
        ("KL", "kl"),
        ("frac_reward_zero_std", "zero_variance_groups"),
        ("meanReward", "train_reward"),
        ("Val total_rewards_mean", "heldout_reward"),
        ("clipped_ratio", "truncation_ratio"),
        ("mean_length", "response_length"),
        ("Training Loss", "loss"),
        # what no word rule may take: a setting, an evaluation's non-score, a prompt's length
        ("actor/kl_coef", None),
        ("Val kl", None),
        ("eval_frac_reward_zero_std", None),
        ("prompt_length/clip_ratio", None),
        ("prompt_length/mean", None),
        ("reward/valid_rate", "train_reward"),  # valid outputs, not a validation set
        ("Learning Rate", None),
        ("Tokens/sec", None),
        ("time/compute_kl_sample_train", None),  # Tinker: seconds spent on the KL (real row)
        ("timing_s/reward", None),
    ],
)
def test_what_a_name_is_bound_to_by_its_words(name: str, indicator: str | None) -> None:
    found = IndicatorMap(presets=("verl",)).resolve(name)  # verl knows none of them
    assert (found.value if found else None) == indicator


def test_inspect_says_which_metrics_were_bound_by_their_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from streamwatch.cli.main import main

    log = tmp_path / "custom.jsonl"
    rows = [
        {"run_id": "custom", "step": s, "metrics": {"mean_reward": 0.1 * s, "reward": 0.1 * s}}
        for s in range(1, 4)
    ]
    log.write_text("".join(f"{json.dumps(r)}\n" for r in rows), encoding="utf-8")
    assert main(["inspect", str(log)]) == 0
    out = capsys.readouterr().out
    assert "train_reward <- reward " in out  # TRL's name, a preset rule, outranks the words
    assert "mean_reward: matches train_reward, outranked" in out
    rows = [{"run_id": "custom", "step": s, "metrics": {"mean_reward": 0.1 * s}} for s in (1, 2)]
    log.write_text("".join(f"{json.dumps(r)}\n" for r in rows), encoding="utf-8")
    assert main(["inspect", str(log)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "<- mean_reward" in x)
    assert line.strip().startswith("train_reward") and line.endswith("(by its words: reward)")


@pytest.mark.parametrize("case", ["trl-5697-quickstart-truncation", "unsloth-2291-loss-zero-table"])
def test_field_rows_in_a_users_own_names_need_no_alias(case: str) -> None:
    """Two public reports whose tables name TRL's metrics in the user's own words
    (``reward_mean``, ``clipped_ratio``, ``Training Loss``): their words bind them as the
    aliases written for them did (and unsloth's ``completion_length``, which had none), and
    the same incidents fire: truncation and no signal in one, nothing in the healthy one."""
    from streamwatch.config import Config
    from streamwatch.incidents import Status
    from streamwatch.replay.files import replay_files

    field = Path(__file__).parent / "data" / "field"
    (spec,) = [c for c in json.loads((field / "cases.json").read_text("utf-8")) if c["id"] == case]
    path = field / f"{case}.jsonl"
    aliases = {"indicators": {"aliases": spec["aliases"]}}
    with_aliases = replay_files([path], Config.model_validate(aliases))
    by_words = replay_files([path])

    def fired(result: object) -> list[tuple[str, str, int]]:
        return [
            (i.kind, i.severity.value, i.step)
            for i in result.incidents  # type: ignore[attr-defined]
            if i.status is Status.FIRING
        ]

    assert fired(by_words) == fired(with_aliases)
    (run,) = by_words.bindings
    words = {b.metric: b.indicator for b in run.bound if b.pattern}
    assert spec["aliases"].items() <= words.items()


# -- a held-out metric that stops being logged hands its indicator over ---------------------

OPD_LOG = Path(__file__).parent / "data" / "real" / "runs" / "verl-opd-aime-qwen2-3b-do7bl4gg"


def test_a_held_out_metric_logged_once_hands_over_to_the_one_logged_at_every_evaluation() -> None:
    """A verl run of the corpus logs val-core/aime_2024/acc/mean@16 at step 0 only and
    val-aux/aime_2024/reward/mean@16 at every evaluation (every 10 steps, -0.77 -> -0.59):
    after three evaluations without the first, the second feeds the held-out reward, which
    the run's context then reads (before, its held-out reward was one value)."""
    from streamwatch.engine.bindings import format_bindings
    from streamwatch.replay.files import replay_files

    result = replay_files([OPD_LOG / "output.log"])
    [rb] = result.bindings
    fed = {b.indicator: b.metric for b in rb.bound}
    assert fed["heldout_reward"] == "val-aux/aime_2024/reward/mean@16"
    assert rb.retired == [("val-core/aime_2024/acc/mean@16", "heldout_reward", 0)]
    text = "\n".join(format_bindings(result.bindings))
    assert "val-core/aime_2024/acc/mean@16: fed heldout_reward until it stopped" in text
    # the run's findings are judged with that held-out reward in view
    because = [
        line
        for i in result.incidents
        if i.kind == "truncation_saturation"
        for line in i.evidence["because"]
    ]
    assert any(line.startswith("heldout_reward ") for line in because), because


def _evals(monitor: Monitor, steps: range, owner_every: int) -> None:
    for step in steps:
        metrics = {"val-aux/gsm8k/reward/mean@4": 0.5 + step / 1000}
        if step % owner_every == 0:
            metrics["val-core/gsm8k/acc/mean@4"] = 0.4 + step / 1000
        monitor.process(Event(run_id="r", step=step, metrics=metrics))


def test_a_held_out_metric_on_its_own_slower_cadence_keeps_its_indicator() -> None:
    # the better-ranked one every third evaluation of the other: never a handover
    monitor = Monitor()
    _evals(monitor, range(0, 400, 10), owner_every=30)
    assert bound(monitor, "r")["heldout_reward"] == "val-core/gsm8k/acc/mean@4"


def test_a_held_out_metric_in_another_event_of_the_same_step_keeps_its_indicator() -> None:
    # one event per evaluation dataset, the bound one's after the other's (TRL logs an
    # evaluation of several datasets this way)
    monitor = Monitor()
    for step in range(0, 200, 10):
        for name, x in [("val-aux/gsm8k/reward/mean@4", 0.5), ("val-core/gsm8k/acc/mean@4", 0.4)]:
            monitor.process(Event(run_id="r", step=step, metrics={name: x}))
    assert bound(monitor, "r")["heldout_reward"] == "val-core/gsm8k/acc/mean@4"


def test_a_handover_forgets_the_old_scale_and_survives_a_snapshot() -> None:
    import pickle

    monitor = Monitor()
    _evals(monitor, range(0, 30, 10), owner_every=1)  # both logged together at 0, 10, 20
    _evals(monitor, range(30, 50, 10), owner_every=1000)  # then the accuracy no more
    run = monitor.runs["r"]
    copy = pickle.loads(pickle.dumps(run))
    _evals(monitor, range(50, 70, 10), owner_every=1000)
    assert bound(monitor, "r")["heldout_reward"] == "val-aux/gsm8k/reward/mean@4"
    # the context holds the new metric's values only: its recent ones, replayed
    assert run.ctx.heldout.values.lane() == [0.53, 0.54, 0.55, 0.56]
    assert run.retired == {"val-core/gsm8k/acc/mean@4": 20}
    assert copy.bound[Indicator.HELDOUT_REWARD] == "val-core/gsm8k/acc/mean@4"
    assert copy.claims["val-aux/gsm8k/reward/mean@4"].missed == 1


def _run(metric: str, values: list[float]) -> tuple[Monitor, list[str], list[str]]:
    """One run logging ``metric`` (and a reward) at steps 1..n; its incidents and problems."""
    monitor = Monitor()
    kinds: list[str] = []
    for step, x in enumerate(values, 1):
        event = Event(run_id="r", step=step, metrics={metric: x, "reward": 0.3 + step / 1000})
        kinds += [f"{u.kind}:{u.status.value}" for u in monitor.process(event)]
    problems = [p.reason for p in monitor.drain_problems()]
    return monitor, kinds, problems


def test_a_count_named_like_a_ratio_is_not_bound_as_one() -> None:
    """A trainer's count of cut completions (0, 1, 12, 398 of a batch) under a name that
    says truncation: never read as a truncation ratio (398 would be "39,800% truncated")."""
    counts = [0.0, 1.0, 3.0, 12.0, 398.0, 250.0, 400.0, 397.0] * 5
    monitor, kinds, problems = _run("truncated_completions", counts)
    assert not [k for k in kinds if k.startswith("truncation_saturation:firing")]
    assert "truncation_ratio" not in bound(monitor, "r")
    assert problems == [
        "'truncated_completions' looks like a count (3), not a share: not used as the "
        "truncation ratio"
    ]
    # watched as a generic metric from then on, and never bound again
    assert monitor.runs["r"].series["truncated_completions"].indicator is None


def test_a_share_pinned_at_one_before_a_count_shows_itself_is_resolved() -> None:
    """A count that reads 1 for its first steps looks like a ratio pinned at 1: what that
    raised is resolved once a value shows it is no share."""
    _, kinds, problems = _run("truncated_completions", [1.0] * 12 + [37.0] * 3)
    assert problems and "looks like a count (37)" in problems[0]
    fired = [k for k in kinds if k.endswith(":firing") and k.startswith("truncation")]
    resolved = [k for k in kinds if k.endswith(":resolved") and k.startswith("truncation")]
    assert len(fired) == len(resolved)


def test_a_count_word_in_the_name_keeps_it_from_the_share_indicators() -> None:
    m = IndicatorMap()
    assert m.resolve("num_truncated") is None
    assert m.resolve("clip_count") is None
    assert m.resolve("truncated_ratio") == "truncation_ratio"


def test_a_percentage_said_so_is_read_as_a_share() -> None:
    """``completions/clipped_pct`` at 35 is 35%: the checks see 0.35, nothing is dropped."""
    monitor, _, problems = _run("completions/clipped_pct", [35.0] * 20)
    assert problems == []
    assert bound(monitor, "r")["truncation_ratio"] == "completions/clipped_pct"
    assert monitor.runs["r"].series["completions/clipped_pct"].scale == 0.01


def test_a_true_ratio_keeps_its_binding() -> None:
    monitor, _, problems = _run("completions/clipped_ratio", [0.0, 0.02, 0.05, 0.01] * 10)
    assert problems == []
    assert bound(monitor, "r")["truncation_ratio"] == "completions/clipped_ratio"


@pytest.mark.parametrize("order", [1, -1])
def test_heldout_binds_verls_mean_accuracy_before_its_best_of_n(order: int) -> None:
    """verl logs ``acc/best@N/mean`` (and worst, majority) beside ``acc/mean@N``: the mean
    over the samples is the held-out score, the best of N an optimistic bound."""
    metrics = {
        "val-core/openai/gsm8k/acc/best@32/mean": 0.97,
        "val-core/openai/gsm8k/acc/best@32/std": 0.01,
        "val-core/openai/gsm8k/acc/maj@32/mean": 0.9,
        "val-core/openai/gsm8k/acc/mean@32": 0.81,
    }
    items = dict(list(metrics.items())[::order])
    m = IndicatorMap()
    mean = "val-core/openai/gsm8k/acc/mean@32"
    assert all(m.rank(mean) < m.rank(other) for other in metrics if other != mean)
    monitor = Monitor()
    monitor.process(Event(run_id="r", step=10, metrics=items))
    assert bound(monitor, "r")["heldout_reward"] == mean
