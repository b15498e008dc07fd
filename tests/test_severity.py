"""Severity from the whole run, on real runs of the corpus (tests/data/real/runs.toml, each
with its source) and on the shapes practitioners call healthy: the run's context decides what
a finding asks of a person, and every incident says why (``evidence.because``)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

from streamwatch.alerting.message import Message
from streamwatch.alerting.notify.slack import slack_payload
from streamwatch.alerting.notify.webhook import alertmanager_payload, webhook_payload
from streamwatch.alerting.testing import incident
from streamwatch.config import Config
from streamwatch.engine.monitor import Monitor
from streamwatch.events import Event
from streamwatch.incidents import Incident, Severity, Status
from streamwatch.replay.files import replay_files
from streamwatch.sources.files import read_events

RUNS = Path(__file__).parent / "data" / "real" / "runs"
REAL = Path(__file__).parent / "data" / "real"
HUMANEVAL = RUNS / "unsloth-grpo-humaneval-qwen3-4b" / "checkpoint-1134" / "trainer_state.json"
GSM8K = RUNS / "unsloth-grpo-gsm8k-qwen" / "checkpoint-250" / "trainer_state.json"
MINESWEEPER = RUNS / "unsloth-grpo-minesweeper-20b" / "checkpoint-500" / "trainer_state.json"


def fired(path: Path, config: Config | None = None) -> list[Incident]:
    return [i for i in replay_files([path], config).incidents if i.status is Status.FIRING]


def history(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads(path.read_text("utf-8"))["log_history"]
    return rows


def values(path: Path, metric: str) -> dict[int, float]:
    return {e.step: e.metrics[metric] for e in read_events([path]) if metric in e.metrics}


def run(rows: list[dict[str, float]]) -> list[Incident]:
    monitor = Monitor()
    out = [
        u
        for step, m in enumerate(rows, 1)
        for u in monitor.process(Event(run_id="r", step=step, metrics=m))
    ]
    return [u for u in out + monitor.flush() if u.status is Status.FIRING]


# -- one extreme step is an outlier ---------------------------------------------------------


def test_a_single_kl_far_beyond_the_ceiling_in_a_run_that_ends_well_is_an_outlier() -> None:
    """Unsloth HumanEval GRPO (79.9% pass@1 reported): KL 12.1 at step 5 and 179 at step
    1025, 0.3-0.5 around them: one step beyond the ceiling and back, no incident. Its one
    KL incident is the two logs in a row beyond the ceiling at steps 15 and 20."""
    kl = {r["step"]: r["kl"] for r in history(HUMANEVAL) if "kl" in r}
    assert round(kl[5], 1) == 12.1 and round(kl[1025]) == 179
    assert kl[1020] < 1 and kl[1030] < 1 and kl[10] < 10
    spikes = [i for i in fired(HUMANEVAL) if i.kind == "metric_spike"]
    assert [(i.step, i.severity) for i in spikes] == [(20, Severity.INFO)]
    assert spikes[0].evidence["steps_beyond"] == 2


# -- small batches alike by chance ------------------------------------------------------------


def test_steps_alike_by_chance_beside_a_moving_reward_are_no_finding() -> None:
    """Unsloth's GSM8K notebook samples one prompt a step: the reward's std is 0 for three
    steps running (63-65) while the reward moves between steps (0.8 at 62, 0.42 at 66) and
    the correctness reward climbs from 0.16 to 1.2-1.3. No learning-signal incident of any
    severity (one warning per streak before)."""
    rows = {r["step"]: r for r in history(GSM8K) if "reward_std" in r}
    assert [rows[s]["reward_std"] for s in (63, 64, 65)] == [0.0, 0.0, 0.0]
    assert rows[62]["reward"] > 0.5 and rows[66]["reward"] > 0.4
    assert not [i for i in fired(GSM8K) if i.kind == "no_learning_signal"]


# -- quantities too small to matter -----------------------------------------------------------


def test_a_ppo_kl_wandering_around_zero_is_no_spike() -> None:
    """The real verl runs' ``actor/ppo_kl`` (-0.0002..0.008) fed as the KL indicator."""
    path = REAL / "verl-grpo-gsm8k_qwen2_7b_off_ppl.jsonl"
    values = [
        json.loads(line)["metrics"].get("actor/ppo_kl") for line in path.read_text().splitlines()
    ]
    kls = [v for v in values if v is not None]
    assert max(abs(v) for v in kls) < 0.01 and min(kls) < 0.0 < max(kls)
    config = Config.model_validate({"indicators": {"aliases": {"actor/ppo_kl": "kl"}}})
    assert not [i for i in fired(path, config) if i.kind == "metric_spike"]


# -- the run's context ---------------------------------------------------------------------


def test_truncation_that_is_being_fixed_while_the_reward_climbs_is_info() -> None:
    """The shape of a PPO run with a tight cap (as reported: a clip ratio of 79% falling
    step by step to 46% by step 12 while the train reward climbs 0.08 -> 0.41), continued to
    40 steps at the same pace, the reward's batch noise 0.02: info, never a warning."""
    clip = [0.79, 0.77, 0.75, 0.74, 0.70, 0.68, 0.64, 0.61, 0.57, 0.54, 0.50, 0.46]
    clip += [0.46 - 0.012 * k for k in range(1, 29)]
    reward = [0.08 + 0.03 * k + 0.02 * (-1) ** k for k in range(40)]
    rows = [
        {"response_length/clip_ratio": c, "critic/score/mean": r}
        for c, r in zip(clip, reward, strict=True)
    ]
    found = [i for i in run(rows) if i.kind == "truncation_saturation"]
    assert found and all(i.severity is Severity.INFO for i in found)
    assert "falling" in found[0].evidence["because"][-1]


def test_answers_shortening_as_that_truncation_falls_are_no_collapse() -> None:
    """The same run with its mean length logged: a 1,024-token cap, the length following the
    clip ratio down (the cut completions are the long ones), 2% batch noise. Answers that
    shorten as fewer hit the cap, the reward climbing, are the policy learning to finish."""
    clip = [0.79, 0.77, 0.75, 0.74, 0.70, 0.68, 0.64, 0.61, 0.57, 0.54, 0.50, 0.46]
    clip += [0.46 - 0.012 * k for k in range(1, 49)]
    reward = [0.08 + 0.015 * k + 0.02 * (-1) ** k for k in range(60)]
    rng = random.Random(5)
    rows = [
        {
            "response_length/clip_ratio": c,
            "critic/score/mean": r,
            "response_length/mean": 1024 * (0.3 + 0.7 * c) * (1 + 0.02 * rng.gauss(0, 1)),
        }
        for c, r in zip(clip, reward, strict=True)
    ]
    found = [i for i in run(rows) if i.kind == "length_collapse"]
    assert found, "the fall is seen"
    assert all(i.severity is Severity.INFO for i in found), [i.message for i in found]
    assert "learning to finish" in found[0].evidence["because"][-1]


def test_a_real_collapse_to_one_token_answers_with_the_reward_falling_still_pages() -> None:
    """verl on-policy distillation, Qwen3-4B (failing in the corpus): mean length about
    1,800 tokens, 88 at step 9, 1 from step 12; the score -0.68 -> -1.0."""
    path = RUNS / "verl-opd-aime-qwen3-4b-i80f2v90" / "output.log"
    found = [i for i in fired(path) if i.kind == "length_collapse"]
    assert [(i.step, i.severity) for i in found] == [
        (11, Severity.WARNING),
        (12, Severity.CRITICAL),
    ]


def test_the_same_truncation_not_falling_with_a_flat_reward_warns_then_pages() -> None:
    clip = [0.79 + 0.01 * (-1) ** k for k in range(40)]
    reward = [0.08 + 0.02 * (-1) ** k for k in range(40)]
    rows = [
        {"response_length/clip_ratio": c, "critic/score/mean": r}
        for c, r in zip(clip, reward, strict=True)
    ]
    found = [i for i in run(rows) if i.kind == "truncation_saturation"]
    assert [i.severity for i in found] == [Severity.WARNING, Severity.CRITICAL]
    # warned once its Kendall interval shuts out a fall that would halve it in 200 steps
    # (evidence, not a wait), critical at critical_steps
    assert found[0].step == 15 and found[1].step == 20
    assert "not falling" in found[0].evidence["because"][-1]


def test_a_real_clip_ratio_stuck_near_80_percent_beside_a_flat_reward_warns_then_pages() -> None:
    """Unsloth's Minesweeper GRPO (gpt-oss-20b), its last 21 logs (steps 300-500, every 10
    steps): 76-88% of completions truncated at every log, the reward wandering between -8.4
    and 10.3 with no trend. Not near 1, so no warning at once; a warning once its interval
    shuts out a fall that would halve it in 200 steps (the 9th log), critical after 20."""
    rows = [r for r in history(MINESWEEPER) if r["step"] >= 300]
    assert len(rows) == 21 and all(0.76 <= r["completions/clipped_ratio"] <= 0.88 for r in rows)
    monitor = Monitor()
    out = []
    for r in rows:
        metrics = {k: r[k] for k in ("completions/clipped_ratio", "reward")}
        out += monitor.process(Event(run_id="r", step=r["step"], metrics=metrics))
    found = [u for u in out + monitor.flush() if u.kind == "truncation_saturation"]
    assert [(u.step, u.severity) for u in found if u.status is Status.FIRING] == [
        (380, Severity.WARNING),
        (490, Severity.CRITICAL),
    ]
    assert "not falling" in found[0].evidence["because"][-1]


def test_a_noisy_sparse_falling_clip_ratio_beside_a_rising_reward_never_warns() -> None:
    """The second healthy family's shape (benchmarks/healthy_family.py): a tight cap with
    75% of completions cut, falling to 5% as the reward climbs (the policy learns to finish),
    under Student-t noise of 15% of the level, logged every 5 steps. At its 10th log its
    fall is not shown yet: held, then info once the fall shows; never a warning."""
    rng = random.Random(7)
    rows = []
    for step in range(5, 305, 5):
        progress = 1.0 - math.exp(-step / 200)
        t = rng.gauss(0, 1) / math.sqrt(sum(rng.gauss(0, 1) ** 2 for _ in range(3)) / 3)
        clip = (0.75 - 0.7 * progress) * (1.0 + 0.15 * t / math.sqrt(3.0))
        reward = 0.2 + 0.7 * progress + rng.gauss(0, 0.03)
        rows.append((step, {"completions/clipped_ratio": clip, "reward": reward}))
    monitor = Monitor()
    out = [u for step, m in rows for u in monitor.process(Event(run_id="r", step=step, metrics=m))]
    found = [u for u in out + monitor.flush() if u.kind == "truncation_saturation"]
    assert found and all(u.severity is Severity.INFO for u in found)
    assert found[0].step > 50 and "falling" in found[0].evidence["because"][-1]


def test_length_growth_with_few_truncations_and_a_flat_high_reward_is_not_a_warning() -> None:
    """Reasoning RL lengthens its answers: 190 -> 830 tokens over 1,100 steps, truncation
    under 10%, the reward flat-high, as reported of a real run."""
    rng = random.Random(5)
    rows = [
        {
            "response_length/mean": 190.0 * (830.0 / 190.0) ** (k / 1099) * rng.gauss(1, 0.02),
            "response_length/clip_ratio": max(0.0, 0.02 + 0.06 * k / 1099 + rng.gauss(0, 0.005)),
            "critic/score/mean": 0.85 + rng.gauss(0, 0.02),
        }
        for k in range(1100)
    ]
    assert not [i for i in run(rows) if i.severity is not Severity.INFO]


# -- why, where a person reads it --------------------------------------------------------------


def test_the_why_reaches_slack_and_both_webhook_payloads() -> None:
    because = ["raised by actor/entropy (level rule)", "critical: the reward has stopped rising"]
    inc = incident(evidence={"value": 0.02, "because": because}, severity="critical")
    msg = Message.build("r", "g", {"run_id": inc.run_id}, (inc,))
    text = json.dumps(slack_payload(msg))
    assert "*Why:* raised by actor/entropy (level rule); critical: the reward" in text
    assert '"because"' not in text  # not repeated among the evidence numbers
    assert webhook_payload(msg)["incidents"][0]["because"] == because
    alert = alertmanager_payload(msg)["alerts"][0]
    assert alert["annotations"]["because"] == "; ".join(because)


def test_a_format_reward_is_no_verifiable_one_and_a_grad_norm_back_in_range_no_spike() -> None:
    """A TRL GRPO run that solves its prompts (check_answer 1.6 -> 5.0, format rewards at
    their maxima): ``rewards/match_format_exactly`` checks the look, not the answer, so its
    fall while check_answer rises is no hacking; once every group is solved the grad norm
    is ~0.008, and a return to 4 (where it was while the run learnt) is no spike."""
    path = REAL / "runs" / "trl-grpo-hint-unfaithful"
    found = fired(path / "checkpoint-300" / "trainer_state.json")
    assert not [i for i in found if i.kind == "reward_hacking"]
    spikes = [i for i in found if i.kind == "metric_spike" and i.indicator == "grad_norm"]
    assert not [i for i in spikes if i.severity is not Severity.INFO]


# -- every group alike: solved prompts or a broken reward -----------------------------------


def test_every_group_alike_at_the_reward_s_top_is_a_solved_run_said_once_as_info() -> None:
    """The TRL run above: ``frac_reward_zero_std`` is 1.0 on most steps from ~140 (10 in a row
    over 146-155) with the reward at 10.5, the best it reached (from -1.375); its evaluation
    gives 0.98 accuracy. One info saying the prompts are solved (four criticals before),
    with the remedy."""
    path = REAL / "runs" / "trl-grpo-hint-unfaithful" / "checkpoint-300" / "trainer_state.json"
    rows = {r["step"]: r for r in history(path) if "reward" in r}
    assert all(rows[s]["frac_reward_zero_std"] == 1.0 for s in range(146, 156))
    assert rows[155]["reward"] == max(r["reward"] for r in rows.values()) == 10.5
    signal = [i for i in fired(path) if i.kind == "no_learning_signal"]
    assert [i.severity for i in signal] == [Severity.INFO]
    assert "harder prompts" in signal[0].evidence["because"][-1]


def test_a_zero_gradient_twice_on_batches_that_all_pass_is_no_warning() -> None:
    """A custom GRPO run (Qwen3-1.7B, GSM8K, lr 2e-5, eval accuracy 0.81): ``grad_norm`` is
    exactly 0.0 at steps 22, 29, 34, 35, 38, 39, 46, each a batch whose reward is 1.0 (every
    completion right, std 0) or 0.875 (every group alike, one of eight failing), between
    steps whose grad norm is 0.05-0.46. The batch taught nothing because it was solved."""
    path = RUNS / "custom-grpo-gsm8k-qwen3-1.7b-lr-2e-5" / "step_stat_history.jsonl"
    rows = {r["step"]: r for r in map(json.loads, path.read_text("utf-8").splitlines())}
    zero = [s for s, r in rows.items() if r["grad_norm"] == 0.0]
    assert zero == [22, 29, 34, 35, 38, 39, 46]
    assert {rows[s]["reward_mean"] for s in zero} == {1.0, 0.875}
    signal = [i for i in fired(path) if i.kind == "no_learning_signal"]
    assert signal and all(i.severity is Severity.INFO for i in signal)


def test_the_same_zero_gradients_at_the_reward_s_floor_still_warn() -> None:
    """The rows of the run above with the reward mirrored (r -> 1 - r): the batches that
    taught nothing are now the ones where every completion failed. That is a broken batch,
    not a solved one: the zero gradient twice in a row warns, as before."""
    path = RUNS / "custom-grpo-gsm8k-qwen3-1.7b-lr-2e-5" / "step_stat_history.jsonl"
    rows = [json.loads(line) for line in path.read_text("utf-8").splitlines()]
    keep = ("loss", "grad_norm", "reward_mean", "reward_std")
    flipped = [{k: (1.0 - r[k] if k == "reward_mean" else r[k]) for k in keep} for r in rows]
    signal = [i for i in run(flipped) if i.kind == "no_learning_signal"]
    assert signal and signal[0].severity is Severity.WARNING and signal[0].step == 35


# -- the noise of a one-prompt batch ----------------------------------------------------------


def test_the_noise_of_a_one_prompt_batch_growing_with_its_level_is_no_chaos() -> None:
    """Unsloth's GSM8K notebook: one prompt and six completions a step, so the reward's
    std is 0 at steps where every completion failed (61, 63-65) or passed (82, 89: 2.5)
    between steps that vary. As the reward climbs off its floor (its mean 0.31
    over the reference, 0.93 at step 89) a batch mean that swings between the bounds must
    be noisier; the check saw 2.6x its reference noise and warned at 89 and 206 (the
    correctness reward 0.16 -> 1.2-1.3)."""
    rows = {r["step"]: r for r in history(GSM8K) if "reward_std" in r}
    assert [rows[s]["reward_std"] for s in (82, 89)] == [0.0, 0.0]
    assert rows[82]["reward"] == rows[89]["reward"] == 2.5
    assert not [i for i in fired(GSM8K) if i.kind == "reward_chaos"]


def test_the_same_rewards_without_the_sign_of_a_small_batch_are_judged_by_the_check() -> None:
    """The run above without its ``reward_std``: nothing says the batch is one prompt, and
    the check's own rule stands (its warning at step 90: its CUSUM in the unit of the run's
    own calm bends)."""
    rows = [{"reward": r["reward"]} for r in history(GSM8K) if "reward" in r]
    chaos = [i for i in run(rows) if i.kind == "reward_chaos"]
    assert chaos and chaos[0].severity is Severity.WARNING and chaos[0].step == 90


def _context_of(path: Path) -> Monitor:
    monitor = Monitor()
    for event in read_events([path]):
        monitor.process(event)
    return monitor


def test_a_pass_fail_reward_is_known_by_its_std_and_a_group_mean_std_is_not() -> None:
    """CS336's GSM8K runs score each answer 0 or 1 and log the batch's std: it is
    sqrt(m (1 - m)) at the mean m. TRL's ``reward_std`` is the mean of its groups' stds,
    below that (text2sql: 0.12-0.69 of it)."""
    cs336 = RUNS / "cs336-grpo-gsm8k-qwen2.5-math-1.5b-lr4e-5" / "metrics.jsonl"
    text2sql = RUNS / "trl-grpo-text2sql-3b" / "trainer_state_1000steps.json"
    (binary,) = _context_of(cs336).runs.values()
    (groups,) = _context_of(text2sql).runs.values()
    assert binary.ctx.binary_reward() and binary.ctx.binary_seen >= 200
    assert not groups.ctx.binary_reward() and groups.ctx.binary_seen >= 200


def _pass_fail_rows(levels: list[float], batch: int, seed: int) -> list[dict[str, float]]:
    """Batch means of ``batch`` pass/fail answers at each level, with their std."""
    rng = random.Random(seed)
    rows = []
    for p in levels:
        m = sum(rng.random() < p for _ in range(batch)) / batch
        rows.append({"critic/score/mean": m, "critic/score/std": math.sqrt(m * (1 - m))})
    return rows


def test_a_pass_fail_reward_climbing_off_its_floor_is_no_chaos_but_noise_tripled_is() -> None:
    """A batch of 64 pass/fail answers: its mean's noise grows by sqrt(p (1 - p)) as the
    accuracy climbs off its floor (1.8x from 0.08 to 0.45), with no change in the batch;
    judged in those units it is no chaos on any of 30 seeds (judged as any reward, 3 of them
    warned). The same batch whose mean swings 3x wider at one level still is chaos."""
    climb = [0.08] * 60 + [0.08 + 0.37 * k / 80 for k in range(80)] + [0.45] * 60
    for seed in range(30):
        found = run(_pass_fail_rows(climb, 64, seed))
        assert not [i for i in found if i.kind == "reward_chaos"], seed
    rows = _pass_fail_rows([0.3] * 150, 64, 4)
    rng = random.Random(5)
    for r in rows[100:]:
        m = min(max(0.3 + 3 * (r["critic/score/mean"] - 0.3) + rng.gauss(0, 0.05), 0.0), 1.0)
        r["critic/score/mean"], r["critic/score/std"] = m, math.sqrt(m * (1 - m))
    chaos = [i for i in run(rows) if i.kind == "reward_chaos"]
    assert chaos and chaos[0].severity is not Severity.INFO and chaos[0].step > 100


# -- two KL logs beyond the ceiling, a length that grows with few truncations -------------


def test_two_kl_logs_beyond_the_ceiling_beside_a_reward_that_does_not_fall_are_info() -> None:
    """Unsloth HumanEval GRPO (logs of 5 steps of 8 completions): KL 22.4 at step 15 and
    64.8 at 20, 6.5 at 25 and 1.2 at 30, while the reward goes 0.74, 0.91, 1.18, 1.17.
    A warning before; a third log beyond the ceiling would still page."""
    rows = {r["step"]: r for r in history(HUMANEVAL) if "kl" in r}
    assert [round(rows[s]["kl"], 1) for s in (15, 20, 25, 30)] == [22.4, 64.8, 6.5, 1.2]
    spikes = [i for i in fired(HUMANEVAL) if i.kind == "metric_spike" and i.step <= 30]
    assert spikes and all(i.severity is Severity.INFO for i in spikes)


def test_a_length_tripling_over_hundreds_of_steps_with_few_cut_is_no_explosion() -> None:
    """The same run, logged every 5 steps: the mean length 189 tokens over steps 5-100, 516
    over 240-335 (2.17x in 140 steps at step 265), with 2-7 of a log's 40 completions cut
    (a clip ratio of at most 0.175) and the reward wandering 0.85-1.06 in 20-log means
    around the same level from start to end; the run gained 2.5 points on HumanEval. Growth
    over hundreds of steps under the cap is reasoning RL's course: no explosion (a critical
    at step 265 before, whose 30 logged values spanned 150 steps)."""
    rows = [r for r in history(HUMANEVAL) if "completions/clipped_ratio" in r]
    length = {r["step"]: r["completions/mean_length"] for r in rows}
    assert round(sum(length[s] for s in range(240, 340, 5)) / 20) == 516
    assert max(r["completions/clipped_ratio"] for r in rows if r["step"] <= 335) == 0.175
    first = [r["reward"] for r in rows[:20]]
    last = [r["reward"] for r in rows[-100:]]
    assert abs(sum(first) / 20 - sum(last) / 100) < 0.01  # the same level after 1,134 steps
    assert [i for i in fired(HUMANEVAL) if i.kind == "length_explosion"] == []


# -- entropy falling while the run learns is sharpening --------------------------------------

CS336 = RUNS / "cs336-grpo-gsm8k-qwen2.5-math-1.5b-lr4e-5" / "metrics.jsonl"
CS336_MASKED = RUNS / "cs336-grpo-gsm8k-qwen2.5-math-1.5b-masked-normalize" / "metrics.jsonl"


def test_entropy_falling_below_a_tenth_while_held_out_accuracy_holds_is_info() -> None:
    # CS336 GRPO runs: token entropy 0.92 at step 1, 0.026 (0.098x its reference) from step
    # 96 on, held-out accuracy 0.86 at step 100 and 0.88 at 200 (1,024 problems a eval).
    # Its fast fall to 0.21-0.25x its start by step 50 while the run learns is no incident;
    # below a tenth of its start it is one info a run, said once (sharpening), no warning
    for path in (CS336, CS336_MASKED):
        entropy = [i for i in fired(path) if i.kind == "entropy_collapse"]
        assert [i.severity for i in entropy] == [Severity.INFO], path
        assert 90 <= entropy[0].step <= 105
        assert entropy[0].evidence["ratio_to_reference"] < 0.1
        assert "sharpening" in entropy[0].evidence["because"][-1]


def test_the_same_entropy_with_the_held_out_accuracy_falling_warns() -> None:
    # the same rows, the held-out accuracy losing 0.05 an evaluation from step 100 on: the
    # entropy's fall has ended the learning
    events = []
    for e in read_events([CS336]):
        if e.step > 100 and "eval/answer_accuracy" in e.metrics:
            fall = 0.86 - 0.05 * (e.step - 100) / 5
            e = e.model_copy(
                update={"metrics": {**e.metrics, "eval/answer_accuracy": fall, "eval/reward": fall}}
            )
        events.append(e)
    monitor = Monitor()
    out = [u for e in events for u in monitor.process(e)] + monitor.flush()
    entropy = [u for u in out if u.kind == "entropy_collapse" and u.status is Status.FIRING]
    assert Severity.WARNING in {u.severity for u in entropy}
    assert any("stalled" in " ".join(u.evidence["because"]) for u in entropy)


def test_an_entropy_falling_faster_than_its_trend_at_0_86x_its_start_is_no_collapse() -> None:
    # verl on-policy distillation (output.log): actor/entropy 0.25 over the first steps,
    # 0.215 at step 85, a fall faster than its own trend with the train score flat; the
    # held-out AIME reward goes -0.77 -> -0.59 over the run; at its lowest 0.65x its start:
    # a change of pace, no collapse, no incident (an info at step 85 before)
    path = RUNS / "verl-opd-aime-qwen2-3b-do7bl4gg" / "output.log"
    entropy = values(path, "actor/entropy")
    start = [entropy[s] for s in sorted(entropy)[:5]]
    ratio = entropy[85] / (sum(start) / len(start))
    assert 0.8 < ratio < 0.9 and min(entropy.values()) / (sum(start) / len(start)) > 0.6
    assert [i for i in fired(path) if i.kind == "entropy_collapse"] == []


# -- generic drift: where the metric has been, memory freed ------------------------------------

EASYR1 = RUNS / "easyr1-grpo-geometry3k-vl3b" / "experiment_log_before_resume_step160.jsonl"
ROLL = RUNS / "roll-grpo-rubric-ifeval-qwen3-4b" / "metrics.jsonl"


def test_a_format_accuracy_dipping_inside_its_range_while_the_run_learns_is_no_drift() -> None:
    """The CS336 masked-normalize run: format accuracy 0.18 at step 1, 0.98 over steps
    40-55, 0.78-0.87 over 62-68 and 0.96 again by step 73, held-out accuracy rising: a dip
    to where the run has been. No drift incident (an info at step 70 on two copies before)."""
    fmt = values(CS336_MASKED, "rollout/format_accuracy")
    assert round(fmt[1], 2) == 0.18 and min(fmt[s] for s in range(62, 69)) < 0.87
    assert fmt[73] > 0.95
    assert [i for i in fired(CS336_MASKED) if i.kind == "metric_drift"] == []


def test_host_memory_that_falls_is_no_drift_and_a_device_share_rising_with_room_neither(
    tmp_path: Path,
) -> None:
    """EasyR1 geometry3k: host memory 160 GB over steps 6-90, 142 GB from step ~100 (118 at
    its first step): freed, no incident. ROLL IFEval: the peak device memory share
    0.82-0.84 over its first 100 steps, 0.87 from step ~105: a rise beyond its range with the
    device's room left (under 0.9), no incident; the same rows 0.1 higher, rising to 0.97,
    are said (info)."""
    host = values(EASYR1, "perf/cpu_memory_used_gb")
    assert 155 < host[50] < 165 and host[120] < 145
    assert [i for i in fired(EASYR1) if i.kind == "metric_drift"] == []
    name = "system/peak_memory_fraction"
    device = values(ROLL, name)
    assert max(device[s] for s in device if s < 95) < 0.85 < device[110] < 0.9
    assert [i for i in fired(ROLL) if i.kind == "metric_drift"] == []
    nearer = tmp_path / "metrics.jsonl"
    with ROLL.open() as rows, nearer.open("w") as out:
        for line in rows:
            row = json.loads(line)
            if name in row:
                row[name] += 0.1
            out.write(json.dumps(row) + "\n")
    drift = [i for i in fired(nearer) if i.kind == "metric_drift"]
    assert [(i.metric, i.severity) for i in drift] == [(name, Severity.INFO)]
    assert 0.9 < drift[0].evidence["after"] > drift[0].evidence["range_high"]
