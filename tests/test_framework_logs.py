"""Each framework's own log, read and bound right: a real file where a public repository keeps
one, otherwise a reconstruction from the framework's writer code (``framework_writers``), with
the values of a real healthy run. Each test asserts the bindings of every indicator the log
carries and the incidents it raises."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from framework_writers import (
    events_to_logs,
    hf_rename,
    real_rows,
    write_json_lines,
    write_roll_console,
    write_tensorboard,
    write_trainer_state,
    write_wandb_history,
)

from streamwatch.config import Config
from streamwatch.engine.indicators import PRESETS
from streamwatch.incidents import Severity, Status
from streamwatch.replay.files import ReplayResult, replay_files
from streamwatch.simulate import Fault, RunSpec, simulate_run

FORMATS = Path(__file__).parent / "data" / "formats"

pytest.importorskip("tensorboard")


def replay(*paths: Path, **kw: object) -> ReplayResult:
    return replay_files(list(paths), **kw)  # type: ignore[arg-type]


def bindings(result: ReplayResult, run_id: str) -> dict[str, str]:
    (run,) = [r for r in result.bindings if r.run_id == run_id]
    return {b.indicator: b.metric for b in run.bound}


def serious(result: ReplayResult) -> list[tuple[str, str, int]]:
    return [
        (i.kind, i.indicator, i.step)
        for i in result.incidents
        if i.status is Status.FIRING and i.severity is not Severity.INFO
    ]


# -- real files --------------------------------------------------------------------------------


def test_verl_tensorboard_run_directory_reads_as_its_jsonl_conversion() -> None:
    """verl's TensorBoard file of a real run (volcengine/verl, commit f515de60) gives the same
    events as the JSONL converted from it, and binds verl's names."""
    tb = replay(FORMATS / "tensorboard")
    jsonl = replay(Path(__file__).parent / "data" / "real" / "verl-grpo-q3b_fsdp_base.jsonl")
    assert [f.format for f in tb.file_results] == ["tensorboard"]
    assert (tb.events, tb.values) == (jsonl.events, jsonl.values)
    assert tb.events == 106  # steps 0-105
    assert bindings(tb, "q3b_fsdp_base") == {
        "response_length": "response_length/mean",
        "response_length_max": "response_length/max",
        "response_length_min": "response_length/min",
        "truncation_ratio": "response_length/clip_ratio",
        "train_reward": "critic/score/mean",
        "entropy": "actor/entropy",
        "heldout_reward": "val-core/openai/gsm8k/reward/mean@1",
        "kl": "actor/kl_loss",
        "grad_norm": "actor/grad_norm",
        "loss": "actor/pg_loss",
        "step_time": "timing_s/step",
        "throughput": "perf/throughput",
        "clip_fraction": "actor/pg_clipfrac",
        "reward_max": "critic/score/max",
        "reward_min": "critic/score/min",
    }
    assert serious(tb) == serious(jsonl) == []


@pytest.mark.parametrize(
    ("name", "step", "expected"),
    [
        (
            "verl-issue-7412.log",
            34,
            {"entropy": "actor/entropy", "train_reward": "critic/score/mean"},
        ),
        (
            "rllm-issue-54.log",
            7,
            {"entropy": "actor/entropy_loss", "truncation_ratio": "response_length/clip_ratio"},
        ),
        (
            "sglang-tutorial-issue-106.log",
            80,
            {"heldout_reward": "val-core/openai/gsm8k/reward/mean@1"},
        ),
    ],
)
def test_verl_console_lines_from_public_issues(
    name: str, step: int, expected: dict[str, str]
) -> None:
    path = FORMATS / "verl-console" / name
    result = replay(path)
    assert [f.format for f in result.file_results] == ["console"]
    assert result.events == 1 and result.problem_count == 0
    bound = bindings(result, path.stem)
    assert expected.items() <= bound.items()
    assert {"response_length", "kl", "grad_norm", "loss", "clip_fraction"} <= set(bound)
    text = path.read_text("utf-8")
    pairs = text[text.index(f"step:{step} - ") :].splitlines()[0].split(" - ")[1:]
    assert result.values == len(pairs)


MLX = FORMATS / "mlx-lm"
MLX_BOUND = {
    "train_reward": "Total rewards mean",
    "reward_std": "Grouped rewards std",
    "kl": "KL",
    "loss": "Train loss",
    "heldout_reward": "Val total_rewards_mean",
}


def test_mlx_lm_grpo_console_log_is_read_and_bound_by_the_mlx_lm_preset() -> None:
    """mlx-lm's GRPO (ml-explore/mlx-examples#1233): a run whose every completion scored 0
    but at step 2. Every line is read, the validation lines too, and its names bound."""
    result = replay(MLX / "grpo-rewards-all-zero.log")
    assert [f.format for f in result.file_results] == ["console"]
    assert result.file_results[0].step_source == "mlx-lm's Iter N"
    assert result.events == 10 and result.problem_count == 0
    lines = (MLX / "grpo-rewards-all-zero.log").read_text("utf-8").splitlines()
    assert result.values == sum(len(line.split(": ", 1)[1].split(", ")) for line in lines)
    assert bindings(result, "grpo-rewards-all-zero") == MLX_BOUND


def test_six_printed_mlx_lm_steps_with_every_reward_std_0_raise_no_learning_signal(
    tmp_path: Path,
) -> None:
    """The six steps of the real log whose every std is 0, on their own, read with mlx-lm's
    preset and with none (every name then bound by its words)."""
    lines = (MLX / "grpo-rewards-all-zero.log").read_text("utf-8").splitlines()
    six = [x for x in lines if "Train loss" in x and "Total rewards std 0.000," in x][1:]
    assert [x.split(":")[0] for x in six] == [f"Iter {i}" for i in (20, 21, 22, 80, 81, 82)]
    path = tmp_path / "six.log"
    path.write_text("\n".join(six) + "\n", encoding="utf-8")
    for presets in (tuple(PRESETS), tuple(p for p in PRESETS if p != "mlx_lm")):
        config = Config.model_validate({"indicators": {"presets": presets}})
        result = replay(path, config=config)
        assert serious(result) == [("no_learning_signal", "learning_signal", 22)], presets
    (run,) = result.bindings
    by_words = {b.indicator: (b.metric, b.pattern) for b in run.bound if b.pattern}
    assert by_words["reward_std"] == ("Total rewards std", "reward + std")
    assert by_words["train_reward"] == ("Total rewards mean", "reward")
    assert by_words["kl"] == ("KL", "kl")


def test_mlx_lm_grpo_run_whose_rewards_vary_raises_nothing() -> None:
    """Another mlx-lm GRPO run of the same thread: its format rewards differ between
    completions at most steps (std 0 at three, never three in a row); nothing is wrong with
    its learning signal."""
    result = replay(MLX / "grpo-format-rewards-only.log")
    assert result.events == 9 and result.problem_count == 0
    bound = bindings(result, "grpo-format-rewards-only")
    assert {k: v for k, v in MLX_BOUND.items() if k != "heldout_reward"} == bound
    assert serious(result) == []


def test_trl_console_log_dicts_take_the_progress_bars_step() -> None:
    """A real TRL GRPO console log (JuncyLu/trl_DAPO): the printed dicts at steps 10, 20, 30
    of the 43-step bar, every numeric entry read."""
    path = FORMATS / "trl-grpo-run_terminal.md"
    result = replay(path)
    printed = [ast.literal_eval(m) for m in re.findall(r"\{'loss'.*?\}", path.read_text("utf-8"))]
    assert result.events == 3 and result.values == sum(len(d) for d in printed)
    assert result.file_results[0].step_source == "the training progress bar's count"
    # the third dict: 99.5% of completions truncated, and a gradient of exactly 0 twice running
    assert serious(result) == [
        ("no_learning_signal", "learning_signal", 30),
        ("truncation_saturation", "truncation_ratio", 30),
    ]
    assert bindings(result, "trl-grpo-run_terminal") == {
        "response_length": "completions/mean_length",
        "response_length_max": "completions/max_length",
        "response_length_min": "completions/min_length",
        "truncation_ratio": "completions/clipped_ratio",
        "train_reward": "reward",
        "reward_std": "reward_std",
        "entropy": "entropy",
        "grad_norm": "grad_norm",
        "loss": "loss",
        "zero_variance_groups": "frac_reward_zero_std",
        "clip_fraction": "clip_ratio/region_mean",
    }


# -- reconstructions from the frameworks' writer code ------------------------------------------

#: framework -> (its name for each quantity, the indicators they bind)
TENSORBOARD_FRAMEWORKS = {
    "openrlhf": {  # openrlhf/utils/logging_utils.py: add_scalar(f"train/{k}"), eval/ likewise
        "entropy": "train/entropy_loss",
        "reward": "train/rollout/reward_mean",
        "length": "train/rollout/response_length_mean",
        "truncation": "train/rollout/truncated_rate",
        "kl": "train/kl",
        "grad_norm": "train/actor_grad_norm",
        "loss": "train/policy_loss",
        "clip": "train/ppo_clip_ratio",
        "heldout": "eval/eval_gsm8k_pass1",
        "step_time": "train/timing/step_total",
    },
    "nemo_rl": {  # nemo_rl/algorithms/grpo.py: log_metrics(..., prefix="train"/"validation")
        "entropy": "train/approx_entropy",
        "reward": "train/reward",
        "length": "train/mean_gen_tokens_per_sample",
        "truncation": "train/truncation_rate",
        "kl": "train/kl_penalty",
        "grad_norm": "train/grad_norm",
        "loss": "train/loss",
        "clip": "train/probs_ratio_clamped",
        "heldout": "validation/accuracy",
    },
    "slime": {  # slime/observability: "rollout/" + rollout metrics, "train/" + train metrics
        "entropy": "rollout/entropy",
        "reward": "rollout/raw_reward",
        "length": "rollout/response_len/mean",
        "truncation": "rollout/truncated_ratio",
        "kl": "train/kl_loss",
        "grad_norm": "train/grad_norm",
        "loss": "train/pg_loss",
        "clip": "train/pg_clipfrac",
        "step_time": "perf/step_time",
    },
    "skyrl": {  # skyrl/backends/skyrl_train/workers/worker.py: "policy/" + status keys
        "entropy": "policy/policy_entropy",
        "reward": "reward/avg_raw_reward",
        "length": "generate/avg_num_tokens",
        "kl": "policy/policy_kl",
        "grad_norm": "policy/grad_norm",
        "loss": "policy/policy_loss",
        "clip": "policy/loss_metrics/clip_ratio",
        "heldout": "eval/all/avg_score",
    },
    "areal": {  # areal/trainer/ppo/actor.py: stats_tracker scope "ppo_actor", "/avg" suffix
        "entropy": "ppo_actor/update/entropy/avg",
        "reward": "ppo_actor/task_reward/avg",
        "length": "ppo_actor/seq_len/avg",
        "truncation": "ppo_actor/no_eos_ratios/avg",
        "kl": "ppo_actor/update/approx_kl/avg",
        "grad_norm": "ppo_actor/update/grad_norm",
        "loss": "ppo_actor/update/actor_loss/avg",
        "clip": "ppo_actor/update/clip_ratio/avg",
    },
}

#: quantity -> the indicator it feeds
INDICATOR = {
    "entropy": "entropy",
    "reward": "train_reward",
    "length": "response_length",
    "truncation": "truncation_ratio",
    "kl": "kl",
    "grad_norm": "grad_norm",
    "loss": "loss",
    "clip": "clip_fraction",
    "heldout": "heldout_reward",
    "step_time": "step_time",
}


@pytest.mark.parametrize("framework", sorted(TENSORBOARD_FRAMEWORKS))
def test_tensorboard_frameworks(framework: str, tmp_path: Path) -> None:
    names = TENSORBOARD_FRAMEWORKS[framework]
    run_dir = write_tensorboard(tmp_path / framework / "grpo-q3b", real_rows(names))
    result = replay(tmp_path / framework)
    assert [f.format for f in result.file_results] == ["tensorboard"]
    assert result.problem_count == 0
    assert bindings(result, run_dir.name) == {INDICATOR[q]: m for q, m in names.items()}
    assert serious(result) == []


def test_slime_held_out_needs_an_alias(tmp_path: Path) -> None:
    """slime names its held-out metric after the data set (eval/<name>): no preset can know
    it; an alias binds it."""
    from streamwatch.config import Config, IndicatorSettings

    names = {**TENSORBOARD_FRAMEWORKS["slime"], "heldout": "eval/gsm8k"}
    write_tensorboard(tmp_path / "grpo-q3b", real_rows(names))
    plain = replay(tmp_path)
    assert "heldout_reward" not in bindings(plain, "grpo-q3b")
    config = Config(indicators=IndicatorSettings(aliases={"eval/gsm8k": "heldout_reward"}))
    aliased = replay(tmp_path, config=config)
    assert bindings(aliased, "grpo-q3b")["heldout_reward"] == "eval/gsm8k"


def test_roll_console(tmp_path: Path) -> None:
    names = {
        "entropy": "critic/entropy/mean",
        "reward": "critic/score/mean",
        "length": "tokens/response_length/mean",
        "truncation": "actor/max_len_mask_ratio",
        "kl": "actor/kl_loss",
        "grad_norm": "actor_train/grad_norm",
        "loss": "actor/pg_loss",
        "clip": "actor/ppo_ratio_clipfrac",
        "heldout": "val/gsm8k/score/mean",
        "step_time": "time/step_total",
    }
    rows = real_rows(names)
    path = write_roll_console(tmp_path / "log_rank_DRIVER_0_1.log", rows)
    result = replay(path)
    assert [f.format for f in result.file_results] == ["console"]
    assert result.events == len(rows) and result.problem_count == 0
    assert bindings(result, path.stem) == {INDICATOR[q]: m for q, m in names.items()}
    assert serious(result) == []


def test_prime_rl_metrics_jsonl(tmp_path: Path) -> None:
    """prime-rl's FileMonitor: ``{"step": n, "time": t, **metrics}`` per log call."""
    names = {
        "entropy": "entropy/all/mean",
        "reward": "train/agg/effective/reward/mean",
        "length": "train/agg/effective/num_output_tokens/mean",
        "truncation": "train/agg/effective/default/is_truncated/mean",
        "grad_norm": "optim/grad_norm",
        "loss": "loss/mean",
        "heldout": "eval/gsm8k/effective/default/avg@1",
        "step_time": "time/step",
    }
    rows = real_rows(names)
    path = write_json_lines(
        tmp_path / "grpo-q3b" / "metrics.jsonl",
        ({"step": step, "time": wall, **values} for step, wall, values in rows),
    )
    result = replay(path)
    assert [f.format for f in result.file_results] == ["flat"]
    assert result.file_results[0].step_source == "'step'"
    assert result.events == len(rows) and result.problem_count == 0
    assert bindings(result, "grpo-q3b") == {INDICATOR[q]: m for q, m in names.items()}
    assert serious(result) == []


def test_ms_swift_logging_jsonl(tmp_path: Path) -> None:
    """ms-swift's logging.jsonl: the Trainer's log dict plus ``global_step/max_steps`` "N/M"
    and text fields (``swift/trainers/patcher.py``), written by its JsonlWriter. The dicts are
    the real TRL GRPO ones of ``trl-grpo-run_terminal.md``, ``entropy`` under ms-swift's name."""
    text = (FORMATS / "trl-grpo-run_terminal.md").read_text("utf-8")
    printed = [ast.literal_eval(m) for m in re.findall(r"\{'loss'.*?\}", text)]
    lines = []
    for n, d in enumerate(printed, start=1):
        d = {("entropy/mean" if k == "entropy" else k): v for k, v in d.items()}
        lines.append(
            {
                **d,
                "global_step/max_steps": f"{10 * n}/43",
                "elapsed_time": f"{14 * n}m 12s",
                "remaining_time": "44m 45s",
                "memory(GiB)": 61.2,
                "train_speed(s/it)": 81.39,
            }
        )
    path = write_json_lines(tmp_path / "v0-20251022-181457" / "logging.jsonl", lines)
    result = replay(path)
    assert [f.format for f in result.file_results] == ["flat"]
    assert result.file_results[0].step_source == "'global_step/max_steps'"
    assert [r for r in result.file_results[0].runs] == ["v0-20251022-181457"]
    bound = bindings(result, "v0-20251022-181457")
    assert bound["entropy"] == "entropy/mean" and bound["truncation_ratio"] == (
        "completions/clipped_ratio"
    )
    assert result.values == sum(len(d) for d in printed) + 2 * len(printed)  # + memory, speed


# -- one TRL run, three records ---------------------------------------------------------------


def test_one_trl_run_as_trainer_state_tensorboard_and_wandb_raises_the_same_incidents(
    tmp_path: Path,
) -> None:
    """The same simulated TRL run (entropy collapse from step 150) written as the Trainer writes
    trainer_state.json, as its TensorBoardCallback writes events (``train/...``, ``eval/...``)
    and as a W&B history export (``_step`` counting log calls): same incidents, same steps."""
    spec = RunSpec(
        run_id="trl-grpo",
        steps=300,
        hosts=1,
        ranks_per_host=1,
        eval_every=10,
        seed=3,
        framework="trl",
        faults=(Fault("entropy_collapse", 150),),
    )
    logs = events_to_logs(simulate_run(spec), "eval_reward")
    entries = [{**values, "step": step} for step, _, values in logs]
    state = write_trainer_state(tmp_path / "trl-grpo" / "trainer_state.json", entries, 299)
    renamed = [(s, ts, {hf_rename(k): v for k, v in values.items()}) for s, ts, values in logs]
    tb = write_tensorboard(tmp_path / "tb" / "trl-grpo", renamed)
    wandb = write_wandb_history(tmp_path / "trl-grpo.csv", renamed)

    found = {}
    for name, path in (("trainer_state", state), ("tensorboard", tb), ("wandb", wandb)):
        result = replay(path)
        assert result.problem_count == 0, (name, result.problems[:3])
        found[name] = serious(result)
        assert bindings(result, "trl-grpo")["heldout_reward"] in ("eval_reward", "eval/reward")
    assert ("entropy_collapse", "entropy", found["trainer_state"][0][2]) in found["trainer_state"]
    assert found["tensorboard"] == found["trainer_state"]
    assert found["wandb"] == found["trainer_state"]


def test_a_reward_function_with_no_value_is_no_value_live_and_replayed(tmp_path: Path) -> None:
    """TRL logs ``None`` for a reward function that scored nothing in a window; the live
    callback and the replay of the run's trainer_state.json read the same metrics."""
    import json
    import math

    from streamwatch.client.integrations.hf import trainer_metrics
    from streamwatch.sources import FileSource

    logs = {"loss": 0.1, "reward": math.nan, "rewards/format/mean": None, "epoch": 0.5}
    live = trainer_metrics(logs)
    path = tmp_path / "run" / "trainer_state.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"log_history": [{**logs, "step": 3}]}), encoding="utf-8")
    (replayed,) = list(FileSource(path))
    assert list(replayed.metrics) == list(live) == ["loss", "reward", "epoch"]
    assert math.isnan(replayed.metrics["reward"]) and math.isnan(live["reward"])
