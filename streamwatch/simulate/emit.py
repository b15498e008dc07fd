"""From simulated curves to events: metric names, per-rank events, several runs, JSONL."""

from __future__ import annotations

import heapq
import json
import os
from collections.abc import Iterable, Iterator, Sequence

from streamwatch.events import Event, Source, finished_event
from streamwatch.simulate.curves import Observed, draw_params, healthy, observe
from streamwatch.simulate.faults import apply_faults
from streamwatch.simulate.noise import draw_noise
from streamwatch.simulate.spec import RunSpec

__all__ = ["METRIC_NAMES", "observe_run", "simulate", "simulate_run", "write_jsonl"]

#: framework -> canonical series -> the metric name it is logged under. A framework logs only
#: the series it has a name for: verl no zero-variance fraction, TRL no score max and min.
METRIC_NAMES: dict[str, dict[str, str]] = {
    "verl": {
        "entropy": "actor/entropy",
        "token_prob": "actor/mean_token_prob",
        "reward": "critic/score/mean",
        "score_std": "critic/score/std",
        "length": "response_length/mean",
        "length_max": "response_length/max",
        "length_min": "response_length/min",
        "clip_ratio": "response_length/clip_ratio",
        "kl": "actor/kl_loss",
        "grad_norm": "actor/grad_norm",
        "pg_loss": "actor/pg_loss",
        "pg_clipfrac": "actor/pg_clipfrac",
        "lr": "actor/lr",
        "mfu": "perf/mfu/actor",
        "gen_time": "timing_s/gen",
        "step_time": "timing_s/step",
        "throughput": "perf/throughput",
        "heldout": "val-core/gsm8k/reward/mean@1",
        "score_max": "critic/score/max",
        "score_min": "critic/score/min",
        "mismatch": "training/rollout_probs_diff_mean",
    },
    "trl": {
        "entropy": "entropy",
        "token_prob": "completions/mean_token_prob",
        "reward": "reward",
        "score_std": "reward_std",
        "length": "completions/mean_length",
        "length_max": "completions/max_length",
        "length_min": "completions/min_length",
        "clip_ratio": "completions/clipped_ratio",
        "kl": "kl",
        "grad_norm": "grad_norm",
        "pg_loss": "loss",
        "pg_clipfrac": "clip_ratio/region_mean",
        "lr": "learning_rate",
        "mfu": "mfu",
        "gen_time": "generation_time",
        "step_time": "step_time",
        "throughput": "throughput",
        "heldout": "eval_reward",
        "zero_variance": "frac_reward_zero_std",
        "mismatch": "sampling/sampling_logp_difference/mean",
    },
}

#: Series rank 0 logs every training step (per-rank timing and held-out come on top).
_TRAINING = (
    "entropy",
    "token_prob",
    "kl",
    "pg_loss",
    "pg_clipfrac",
    "grad_norm",
    "mfu",
    "lr",
    "reward",
    "score_std",
    "length",
    "length_max",
    "length_min",
    "clip_ratio",
    "gen_time",
    "score_max",
    "score_min",
    "zero_variance",
    "mismatch",
)


def observe_run(spec: RunSpec) -> Observed:
    """Every logged value of a run as arrays (index = step), before it becomes events."""
    params = draw_params(spec)
    latent = healthy(spec, params)
    apply_faults(spec, params, latent)
    return observe(spec, params, latent, draw_noise(spec, params.grad_spike_rate))


def simulate_run(spec: RunSpec) -> Iterator[Event]:
    """The events of one run, in time order.

    Step 0 holds only rank 0's pre-training held-out evaluation (none if ``eval_every`` is
    0). From step 1 on, every rank logs one event per step: rank 0 of node-0 the training
    metrics plus its ``timing_s/step`` and ``perf/throughput`` (and the held-out reward every
    ``eval_every`` steps), the other ranks their own step time and throughput. Events within
    a step are ordered by timestamp.
    """
    obs = observe_run(spec)
    names = METRIC_NAMES[spec.framework]
    columns = [(names[k], obs.series[k].tolist()) for k in _TRAINING if k in names]
    heldout_name, heldout = names["heldout"], obs.series["heldout"].tolist()
    time_name, thr_name = names["step_time"], names["throughput"]
    step_time, throughput, ts = obs.step_time.tolist(), obs.throughput.tolist(), obs.ts.tolist()
    sources = [Source(host=f"node-{r // spec.ranks_per_host}", rank=r) for r in range(spec.ranks)]
    ranks = range(spec.ranks)
    every = spec.eval_every
    for step in range(min(obs.stop_at, spec.steps)):
        if step == 0:
            if every:
                yield Event(
                    run_id=spec.run_id,
                    step=0,
                    ts=ts[0][0],
                    metrics={heldout_name: heldout[0]},
                    source=sources[0],
                )
            continue
        for rank in sorted(ranks, key=lambda r: ts[r][step]):
            metrics: dict[str, float] = {}
            if rank == 0:
                metrics = {name: col[step] for name, col in columns}
            metrics[time_name] = step_time[rank][step]
            metrics[thr_name] = throughput[rank][step]
            if rank == 0 and every and step % every == 0:
                metrics[heldout_name] = heldout[step]
            yield Event(
                run_id=spec.run_id,
                step=step,
                ts=ts[rank][step],
                metrics=metrics,
                source=sources[rank],
            )
    if spec.finished_marker and obs.stop_at >= spec.steps:
        # the run completed: every rank says so, as a Publisher does on close
        last = spec.steps - 1
        for rank in sorted(ranks, key=lambda r: ts[r][last]):
            yield finished_event(spec.run_id, last, ts[rank][last], sources[rank])


def _ts(event: Event) -> float:
    return event.ts if event.ts is not None else 0.0


def simulate(specs: Sequence[RunSpec]) -> Iterator[Event]:
    """Several runs' events interleaved by timestamp (ties: the order of ``specs``)."""
    seen: set[str] = set()
    for spec in specs:
        if spec.run_id in seen:
            raise ValueError(f"run_id {spec.run_id!r} appears twice")
        seen.add(spec.run_id)
    return heapq.merge(*(simulate_run(spec) for spec in specs), key=_ts)


def write_jsonl(events: Iterable[Event], path: str | os.PathLike[str]) -> int:
    """Write one JSON object per line (non-finite values as bare NaN/Infinity); return the count."""
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for event in events:
            out.write(json.dumps(event.to_json_dict()))
            out.write("\n")
            count += 1
    return count
