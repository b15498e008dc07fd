"""Files written the way each framework writes them, for the frameworks whose logs no public
repository keeps: reconstructions from the frameworks' own writer code (named at each writer),
filled with the values of a real run.

The values are those of the real verl GRPO run in ``tests/data/real`` (Qwen2.5-3B on GSM8K,
healthy), carried over to each framework's names for the same quantity. The bytes are what each
framework's writer produces: TensorBoard event files through ``tensorboard``'s own event file
writer with one scalar per record, as PyTorch's ``SummaryWriter.add_scalar`` writes them; JSON
lines with ``json.dumps``; console lines through the framework's logging format.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from streamwatch.events import Event
from streamwatch.sources import FileSource

REAL_RUN = Path(__file__).parent / "data" / "real" / "verl-grpo-q3b_fsdp_base.jsonl"
#: the real run's first wall time (its TensorBoard file), and its seconds per step, roughly
START_TS = 1_753_500_620.0
STEP_SECONDS = 90.0

#: the real run's metric for each quantity the frameworks below log
VERL = {
    "entropy": "actor/entropy",
    "reward": "critic/score/mean",
    "length": "response_length/mean",
    "truncation": "response_length/clip_ratio",
    "kl": "actor/kl_loss",
    "grad_norm": "actor/grad_norm",
    "loss": "actor/pg_loss",
    "clip": "actor/pg_clipfrac",
    "heldout": "val-core/openai/gsm8k/reward/mean@1",
    "step_time": "timing_s/step",
}

Rows = list[tuple[int, float, dict[str, float]]]


def real_rows(names: Mapping[str, str]) -> Rows:
    """The real run's steps as (step, wall time, {framework name: value}), for the quantities
    ``names`` maps (quantity -> the framework's metric name)."""
    rows: Rows = []
    for event in FileSource(REAL_RUN):
        values = {
            names[q]: event.metrics[m] for q, m in VERL.items() if q in names and m in event.metrics
        }
        if values:
            rows.append((event.step, START_TS + STEP_SECONDS * event.step, values))
    return rows


def write_tensorboard(logdir: Path, rows: Rows) -> Path:
    """One scalar per record, as ``SummaryWriter.add_scalar(tag, value, step)`` writes it
    (verl, OpenRLHF, NeMo RL, slime, SkyRL, AReaL and ROLL all log through it)."""
    from tensorboard.compat.proto.event_pb2 import Event as TbEvent
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    logdir.mkdir(parents=True, exist_ok=True)
    writer = EventFileWriter(str(logdir))
    for step, wall, values in rows:
        for tag, value in values.items():
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=value)])
            writer.add_event(TbEvent(wall_time=wall, step=step, summary=summary))
    writer.close()
    return logdir


def write_json_lines(path: Path, objects: Iterable[Mapping[str, object]]) -> Path:
    """``json.dumps`` per line, as prime-rl's FileMonitor and ms-swift's JsonlWriter write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for obj in objects:
            fh.write(json.dumps(obj, ensure_ascii=False) + "\n")
    return path


def write_roll_console(path: Path, rows: Rows) -> Path:
    """ROLL's StdoutTracker: ``logger.info(f"metrics_tag: {json.dumps({...})}")`` through
    ROLL's formatter (``roll/utils/logging.py``), among other log lines."""
    lines = []
    for step, wall, values in rows:
        minute, second = divmod(int(wall) % 3600, 60)
        stamp = f"2025-07-26 03:{minute:02d}:{second:02d}"
        prefix = f"[{stamp}] [tracking.py (161)] [INFO] [DRIVER 0 / 1][PID 1669044] "
        lines.append(
            f"[{stamp}] [rlvr_pipeline.py (412)] [INFO] [DRIVER 0 / 1][PID 1669044] "
            f"pipeline step {step} finished"
        )
        lines.append(prefix + f"metrics_tag: {json.dumps({'step': step, 'metrics': values})}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def write_trainer_state(
    path: Path, entries: Sequence[Mapping[str, object]], max_steps: int
) -> Path:
    """``TrainerState.save_to_json``: ``json.dumps(asdict(state), indent=2, sort_keys=True)``."""
    state: dict[str, object] = {
        "best_global_step": None,
        "best_metric": None,
        "best_model_checkpoint": None,
        "epoch": 1.0,
        "eval_steps": 10,
        "global_step": max_steps,
        "is_hyper_param_search": False,
        "is_local_process_zero": True,
        "is_world_process_zero": True,
        "log_history": entries,
        "logging_steps": 1,
        "max_steps": max_steps,
        "num_input_tokens_seen": 0,
        "num_train_epochs": 1,
        "save_steps": 500,
        "stateful_callbacks": {},
        "total_flos": 0.0,
        "train_batch_size": 8,
        "trial_name": None,
        "trial_params": None,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def hf_rename(key: str) -> str:
    """transformers' ``rewrite_logs`` for TensorBoard and W&B: ``eval_x`` -> ``eval/x``,
    everything else -> ``train/x``."""
    if key.startswith("eval_"):
        return "eval/" + key[len("eval_") :]
    return "train/" + key


def write_wandb_history(path: Path, logs: Rows) -> Path:
    """A W&B run-history CSV export of a transformers run: one row per ``wandb.log`` call
    (``_step`` counts them), ``train/global_step`` beside the renamed keys."""
    names = sorted({k for _, _, values in logs for k in values})
    header = ["_step", "_runtime", "_timestamp", "train/global_step", *names]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(header)
        for n, (step, wall, values) in enumerate(logs):
            row = [str(n), f"{wall - logs[0][1]:.3f}", f"{wall:.3f}", str(step)]
            out.writerow(row + [repr(values[k]) if k in values else "" for k in names])
    return path


def events_to_logs(events: Iterable[Event], heldout: str) -> Rows:
    """A run's events as a Trainer's log calls: the training values, then (at evaluation
    steps) the held-out metric in a log call of its own, as ``Trainer.evaluate`` makes it."""
    logs: Rows = []
    for e in events:
        ts = e.ts if e.ts is not None else 0.0
        train = {k: v for k, v in e.metrics.items() if k != heldout}
        if train:
            logs.append((e.step, ts, train))
        if heldout in e.metrics:
            logs.append((e.step, ts, {heldout: e.metrics[heldout]}))
    return logs


# -- W&B: a run logged by the real wandb client, offline (no server) -------------------------
WANDB_STEPS = 30
WANDB_NAN_STEP = 20
#: A TRL GRPO run's names, as its W&B callback logs them; a NaN KL at step 20.
WANDB_WRITER = textwrap.dedent(
    """
    import math, sys, time
    import wandb

    root, name, pause = sys.argv[1], sys.argv[2], float(sys.argv[3])
    config = {{"n_gpus": 4, "max_completion_length": 256, "learning_rate": 1e-6}}
    # the client writes its log every 15 s by default; a test cannot wait that long
    settings = wandb.Settings(x_transaction_log_flush_interval=0.1)
    run = wandb.init(
        mode="offline", dir=root, project="grpo", name=name, config=config, settings=settings
    )
    for s in range(1, {steps} + 1):
        run.log(
            {{
                "train/reward": 0.2 + 0.01 * s,
                "train/reward_std": 0.3,
                "train/rewards/accuracy_reward/mean": 0.2 + 0.01 * s,
                "train/entropy": 0.9 - 0.005 * s,
                "train/kl": math.nan if s == {nan} else 0.001 * s,
                "train/completions/mean_length": 120.0 + s,
                "train/loss": 0.01,
                "train/grad_norm": 0.5,
                "train/learning_rate": 1e-6,
            }},
            step=s,
        )
        time.sleep(pause)
    wandb.finish()
    """
).format(steps=WANDB_STEPS, nan=WANDB_NAN_STEP)


def wandb_env(root: Path) -> dict[str, str]:
    """The client's environment: offline, its files under ``root`` (none in the home)."""
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(root), "WANDB_SILENT": "true"}
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        env[name] = str(root / ".wandb-home" / name.lower())
    env.pop("WANDB_BASE_URL", None)
    return env


def write_wandb_run(root: Path, name: str, pause: float = 0.0) -> subprocess.Popen[bytes]:
    """Start a process that logs a run of :data:`WANDB_STEPS` steps under ``root/wandb``."""
    return subprocess.Popen(
        [sys.executable, "-c", WANDB_WRITER, str(root), name, str(pause)],
        env=wandb_env(root),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def logged_wandb_run(root: Path, name: str) -> Path:
    """A finished run's directory ``root/wandb/offline-run-<date>-<id>``."""
    proc = write_wandb_run(root, name)
    assert proc.wait(timeout=120) == 0
    return wandb_run_dir(root, name)


def wandb_run_dir(root: Path, name: str) -> Path:
    for log in sorted((root / "wandb").glob("*run-*/run-*.wandb")):
        if name.encode() in log.read_bytes()[:4096]:
            return log.parent
    raise AssertionError(f"no run {name} under {root}")


# -- console blocks: XTuner's RL trainer, AReaL's stats logger -----------------------------------


def write_xtuner_console(path: Path, rows: Rows) -> Path:
    """XTuner's RL trainer log (``xtuner/v1/train/rl_trainer.py``, ``_log_step``): the loguru
    prefix ``[XTuner][time][INFO]``, ``Train step N/TOTAL``, then its timing, data and
    throughput sections of ``- {name:<25}: {value:.4f}`` lines; an ``Eval:`` line between."""
    total = max(step for step, _, _ in rows)
    lines: list[str] = []
    for step, _, values in rows:
        lines.append(f"[XTuner][2025-10-01 12:00:00][INFO] Train step {step}/{total}")
        lines.append(f"Train step {step} finished and timing listed:")
        lines += [f" - {k:<25}: {v:.2f}s" for k, v in (("generation", 40.5), ("training", 9.25))]
        lines.append(f" Train step {step} data statistics:")
        lines += [f"- {k:<25}: {v:.4f}" for k, v in values.items()]
        lines.append(f" Train step {step} throughput statistics:")
        lines.append(f"- {'effective_tgs':<25}: {1234.5:.4f}")
        lines.append(f"[XTuner][2025-10-01 12:00:01][INFO] Eval: accuracy: {0.5:.4f}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _fancy_grid(pairs: list[tuple[str, float]], col: int = 4) -> list[str]:
    """``tabulate(column_major, floatfmt=".4e", tablefmt="fancy_grid")`` as AReaL's
    ``tabulate_stats`` (``areal/utils/data.py``) calls it: ``col`` name/value pairs a row,
    in column-major order."""
    rows_n = (len(pairs) + col - 1) // col
    table = [
        [cell for j in range(col) if i + j * rows_n < len(pairs) for cell in pairs[i + j * rows_n]]
        for i in range(rows_n)
    ]
    texts = [[c if isinstance(c, str) else f"{c:.4e}" for c in row] for row in table]
    width = max(len(r) for r in texts)
    texts = [r + [""] * (width - len(r)) for r in texts]
    sizes = [max(len(r[k]) for r in texts) for k in range(width)]

    def rule(left: str, mid: str, right: str, fill: str) -> str:
        return left + mid.join(fill * (n + 2) for n in sizes) + right

    body = [
        "│ " + " │ ".join(c.ljust(n) for c, n in zip(r, sizes, strict=True)) + " │" for r in texts
    ]
    out = [rule("╒", "╤", "╕", "═")]
    for i, line in enumerate(body):
        out += [line] if i == 0 else [rule("├", "┼", "┤", "─"), line]
    return [*out, rule("╘", "╧", "╛", "═")]


def write_areal_console(path: Path, rows: Rows, steps_per_epoch: int = 10) -> Path:
    """AReaL's stats logger (``areal/utils/stats_logger.py``, ``StatsLogger.commit``): its
    logger's line (``areal/utils/logging.py``'s format) ``Epoch E/N Step S/M Train step G/T
    done.``, ``Stats (1/1):``, then the step's stats as ``tabulate_stats`` prints them."""
    total = max(step for step, _, _ in rows)
    lines: list[str] = []
    for step, _, values in rows:
        epoch, within = divmod(step - 1, steps_per_epoch)
        prefix = "[AReaL] 20250726-10:30:00.000 StatsLogger INFO:"
        lines.append(
            f"{prefix} Epoch {epoch + 1}/{total // steps_per_epoch + 1} Step {within + 1}/"
            f"{steps_per_epoch} Train step {step}/{total} done."
        )
        lines.append(f"{prefix} Stats (1/1):")
        lines.append(f"{prefix} ")
        table = _fancy_grid(list(values.items()))
        table[-1] += "\x1b[0m"  # colorlog's reset, which its log files keep
        lines += table
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
