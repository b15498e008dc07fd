"""The length-explosion check on hand-made curves (fast and slow explosions, healthy drift)
and on a real run's rows."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from streamwatch.checks import LengthCheck
from streamwatch.config import LengthSettings
from streamwatch.engine.findings import Finding
from streamwatch.incidents import Kind
from streamwatch.sources.files import read_events

REAL = Path(__file__).parent / "data" / "real" / "runs"


def explosions(lengths: list[float], steps: list[int] | None = None) -> list[Finding]:
    """The explosions found in ``lengths``, logged at ``steps`` (0, 1, 2, ... by default)."""
    check = LengthCheck("response_length", "response_length/mean", LengthSettings())
    found: list[Finding] = []
    for step, x in zip(steps or range(len(lengths)), lengths, strict=True):
        found += [f for f in check.update(step, x) if f.kind is Kind.LENGTH_EXPLOSION]
    return found


def noisy(levels: list[float], seed: int) -> list[float]:
    rng = random.Random(seed)
    return [x * math.exp(0.03 * rng.gauss(0.0, 1.0)) for x in levels]


def test_a_length_doubling_in_thirty_steps_is_an_explosion() -> None:
    """1.3x per 10 steps: slower than the 1.5x-in-10 test, but 2.2x within 30 steps."""
    for seed in range(5):
        levels = [400.0] * 100 + [400.0 * 1.3 ** (t / 10) for t in range(1, 31)] + [880.0] * 20
        found = explosions(noisy(levels, seed))
        assert found, f"seed {seed}: not found"
        assert 100 < found[0].step <= 130
        assert "x in" in found[0].message


def test_healthy_growth_is_not_an_explosion() -> None:
    """2x over 1,000 steps: the slow growth of a healthy run."""
    for seed in range(5):
        levels = [400.0 * 2 ** (t / 1000) for t in range(1000)]
        assert explosions(noisy(levels, seed)) == []


def test_the_slow_rule_counts_training_steps_not_logged_values() -> None:
    """A verl on-policy distillation run of the corpus (tests/data/real/runs.toml,
    verl-opd-aime-qwen2-3b-do7bl4gg, its console log holding 9 steps of 10): its mean length
    doubles within 30 steps (2.01x by step 53). The same values logged 5 times as far apart
    double over 150 steps, the pace of reasoning RL's lengthening: no slow explosion."""
    path = REAL / "verl-opd-aime-qwen2-3b-do7bl4gg" / "output.log"
    events = [e for e in read_events([path]) if "response_length/mean" in e.metrics]
    lengths = [e.metrics["response_length/mean"] for e in events]
    steps = [e.step for e in events]
    found = explosions(lengths, steps)
    assert (found[0].step, found[0].rule) == (53, "slow")
    assert "2.01x in 30 steps" in found[0].message
    assert explosions(lengths, [5 * s for s in steps]) == []


def test_a_length_climbing_back_from_a_dip_to_its_start_is_no_explosion() -> None:
    """A CS336 GRPO run of the corpus (cs336-grpo-gsm8k-qwen2.5-math-1.5b-masked-normalize,
    healthy): 305 tokens at step 1, 35 at step 5 as it learns the answer format, 128 at step
    18; it grew 1.73x in 10 steps back to its start (1.01x) and was an explosion then. It
    is one from step 50, at 1.35x its start."""
    path = REAL / "cs336-grpo-gsm8k-qwen2.5-math-1.5b-masked-normalize" / "metrics.jsonl"
    name = "rollout/avg_response_token_length"
    events = [e for e in read_events([path]) if name in e.metrics]
    lengths = [e.metrics[name] for e in events]
    assert [round(lengths[i]) for i in (0, 4, 17)] == [305, 35, 128]
    found = explosions(lengths, [e.step for e in events])
    assert found and found[0].step == 50
    assert 1.25 <= found[0].evidence["ratio_to_reference"] < 1.5


@pytest.mark.parametrize(("level", "word"), [(850.0, "falling"), (300.0, "collapsing")])
def test_the_words_of_a_fall_in_length_match_its_size(level: float, word: str) -> None:
    """A 15% dip is "falling", not "collapsing"; a fall to 0.3x its peak is a collapse."""
    rng = random.Random(0)
    check = LengthCheck("response_length", "response_length/mean", LengthSettings())
    messages = []
    for step in range(400):
        x = (1000.0 if step < 250 else level) + rng.gauss(0, 10)
        messages += [f.message for f in check.update(step, x)]
    assert messages and messages[0].startswith(f"response length {word}: "), messages[:1]
    if word == "falling":
        assert not any("collaps" in m for m in messages), messages[:3]


@pytest.mark.parametrize(("level", "word"), [(0.85, "falling"), (0.05, "collapsing")])
def test_the_words_of_a_fall_in_entropy_match_its_size(level: float, word: str) -> None:
    from streamwatch.checks.entropy import EntropyCheck
    from streamwatch.config import EntropySettings

    rng = random.Random(1)
    check = EntropyCheck("entropy", "actor/entropy", EntropySettings())
    messages = []
    for step in range(600):
        x = (1.0 if step < 300 else level) * (1 + rng.gauss(0, 0.01))
        messages += [f.message for f in check.update(step, x)]
    assert messages and messages[0].startswith(f"entropy {word}: "), messages[:1]
