"""``compare``: the statistics, the verdicts on simulated seeds (an injected entropy collapse
is found with its onset; identical settings are indistinguishable) and on real runs."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

from streamwatch.report import RunData, SeriesCollector, Verdict, compare, format_table
from streamwatch.report.compare import compare_runs
from streamwatch.report.stats import (
    block_bootstrap_ci,
    onset_index,
    welch,
    window_noise,
    within_run_test,
)
from streamwatch.simulate import Fault, RunSpec, simulate, simulate_run, write_jsonl

REAL = Path(__file__).parent / "data" / "real"
BASE_7B = REAL / "verl-grpo-gsm8k_qwen2_7b_base.jsonl"
OFF_PPL_7B = REAL / "verl-grpo-gsm8k_qwen2_7b_off_ppl.jsonl"
SEEDS = 6  # per side
STEPS = 400


def spec(run_id: str, seed: int, *faults: Fault) -> RunSpec:
    return RunSpec(run_id, steps=STEPS, seed=seed, hosts=1, ranks_per_host=1, faults=faults)


def group(prefix: str, seeds: range, *faults: Fault) -> dict[str, RunData]:
    collector = SeriesCollector()
    for seed in seeds:
        collector.add_all(simulate_run(spec(f"{prefix}-{seed}", seed, *faults)))
    return collector.runs()


# -- statistics -----------------------------------------------------------------------------


def test_welch_matches_scipy() -> None:
    rng = np.random.default_rng(1)
    b, c = rng.normal(0.0, 1.0, 5), rng.normal(1.0, 2.0, 7)
    est = welch(b, c)
    ref = scipy_stats.ttest_ind(c, b, equal_var=False)
    assert est is not None
    assert est.diff == pytest.approx(c.mean() - b.mean())
    assert est.p == pytest.approx(float(ref.pvalue))


def test_welch_with_one_run_on_a_side_borrows_the_other_sides_spread() -> None:
    group_ = np.array([1.0, 1.2, 0.8, 1.1])
    est = welch(np.array([3.0]), group_)
    assert est is not None and est.df == 3.0
    assert est.se == pytest.approx(group_.std(ddof=1) * math.sqrt(1 + 1 / 4))
    assert welch(np.array([1.0]), np.array([2.0])) is None  # no spread to measure


def test_onset_is_where_the_difference_stays_significant() -> None:
    p = [0.5, 0.001, 0.3, 0.001, 0.002, math.nan, 0.0001]
    assert onset_index(p, [1] * 7, alpha=0.01) == 3
    assert onset_index(p, [1, 1, 1, -1, 1, 0, 1], alpha=0.01) == 4  # the sign flips at 3
    assert onset_index([0.001, 0.2], [1, 1], alpha=0.01) is None  # not at the end
    assert onset_index([0.2, 0.001], [1, 1], alpha=0.01) is None  # in the last window only
    assert onset_index([0.2, 0.001], [1, 1], alpha=0.01, min_windows=1) == 1


def test_window_noise_ignores_a_level_shift() -> None:
    rng = np.random.default_rng(2)
    d = rng.normal(0.0, 1.0, 80)
    d[40:] += 25.0
    assert 0.7 < window_noise(d) < 1.3
    tests = within_run_test(d)
    assert all(t is not None and t.p < 1e-6 for t in tests[45:])


def test_block_bootstrap_interval_is_deterministic_and_covers_the_mean() -> None:
    x = np.random.default_rng(3).normal(2.0, 1.0, 60)
    lo, hi = block_bootstrap_ci(x, 0.95)
    assert (lo, hi) == block_bootstrap_ci(x, 0.95)
    assert lo < x.mean() < hi and hi - lo < 1.2


# -- simulated seeds ------------------------------------------------------------------------


def write_seeds(directory: Path, prefix: str, seeds: range, *faults: Fault) -> list[Path]:
    paths = []
    for seed in seeds:
        path = directory / f"{prefix}-{seed}.jsonl"
        write_jsonl(simulate_run(spec(f"{prefix}-{seed}", seed, *faults)), path)
        paths.append(path)
    return paths


def test_an_entropy_collapse_is_worse_entropy_from_its_onset(tmp_path: Path) -> None:
    onset = 200
    base = write_seeds(tmp_path, "base", range(SEEDS))
    cand = write_seeds(tmp_path, "cand", range(100, 100 + SEEDS), Fault("entropy_collapse", onset))
    result = compare(base, cand, out=tmp_path / "overlay.html")
    entropy = result.get("entropy")
    assert entropy is not None and entropy.verdict is Verdict.WORSE
    assert entropy.onset_step is not None and abs(entropy.onset_step - onset) <= 20
    assert entropy.note.startswith("collapse") and entropy.ci[1] < math.log(0.5)
    assert result.mode == "seeds" and len(result.baseline_runs) == SEEDS
    assert (tmp_path / "overlay.html").stat().st_size > 1_000_000
    table = format_table(result)
    assert re.search(rf"^entropy\s+worse \(lower\)\s+{entropy.onset_step}\s", table, re.M)


@pytest.mark.parametrize("onset", [150, 260])
def test_entropy_collapse_onset_at_other_steps(onset: int) -> None:
    base = group("b", range(10 + onset, 10 + onset + SEEDS))
    cand = group("c", range(50 + onset, 50 + onset + SEEDS), Fault("entropy_collapse", onset))
    entropy = compare_runs(base, cand).get("entropy")
    assert entropy is not None and entropy.verdict is Verdict.WORSE
    assert entropy.onset_step is not None and abs(entropy.onset_step - onset) <= 20


@pytest.mark.slow
def test_identical_settings_are_indistinguishable_in_95_percent_of_trials() -> None:
    trials, flagged = 40, []
    for t in range(trials):
        base = group("b", range(1000 * t, 1000 * t + SEEDS))
        cand = group("c", range(1000 * t + 500, 1000 * t + 500 + SEEDS))
        found = [c.name for c in compare_runs(base, cand).indicators if c.significant]
        if found:
            flagged.append((t, found))
    assert len(flagged) <= trials * 0.05, flagged


def test_several_run_ids_in_one_file_are_seeds_like_one_file_per_seed(tmp_path: Path) -> None:
    seeds = range(3)
    one = tmp_path / "one.jsonl"
    write_jsonl(simulate([spec(f"s-{s}", s) for s in seeds]), one)
    per_seed = write_seeds(tmp_path, "s", seeds)
    cand = write_seeds(tmp_path, "c", range(10, 13), Fault("entropy_collapse", 200))
    a, b = compare([one], cand), compare(per_seed, cand)
    assert a.baseline_runs == b.baseline_runs == ("s-0", "s-1", "s-2")
    assert [(c.name, c.verdict, c.onset_step) for c in a.indicators] == [
        (c.name, c.verdict, c.onset_step) for c in b.indicators
    ]


def test_the_same_run_id_in_two_files_counts_twice(tmp_path: Path) -> None:
    paths = []
    for seed in (1, 2):
        path = tmp_path / f"seed{seed}.jsonl"
        write_jsonl(simulate_run(spec("run", seed)), path)
        paths.append(path)
    result = compare(paths, paths[:1])
    assert result.baseline_runs == ("run", "seed2.jsonl:run") and result.mode == "seeds"


# -- real runs ------------------------------------------------------------------------------


def test_two_real_runs_are_judged_against_within_run_noise() -> None:
    result = compare([BASE_7B], [OFF_PPL_7B])
    assert result.mode == "single" and "WITHIN-RUN NOISE ONLY" in result.basis
    verdicts = {c.name: c for c in result.indicators}
    assert verdicts["throughput"].verdict is Verdict.BETTER
    assert verdicts["step_time"].verdict is Verdict.BETTER
    assert verdicts["heldout_reward"].verdict is Verdict.INDISTINGUISHABLE
    assert verdicts["entropy"].verdict is Verdict.DIFFERENT  # higher, but far from x2
    table = format_table(result)
    assert all(re.search(rf"^{name}\s", table, re.M) for name in verdicts)
    assert "seed-to-seed variation is not measured" in " ".join(table.split())


def test_a_run_against_itself_is_indistinguishable_everywhere() -> None:
    result = compare([BASE_7B], [BASE_7B])
    assert result.indicators and not any(c.significant for c in result.indicators)
    assert all(c.effect == 0.0 for c in result.indicators)


def test_indicators_and_metrics_can_be_chosen() -> None:
    result = compare([BASE_7B], [OFF_PPL_7B], indicators=["heldout_reward", "perf/mfu/actor"])
    assert [c.name for c in result.indicators] == ["heldout_reward", "perf/mfu/actor"]
    mfu = result.get("perf/mfu/actor")
    assert mfu is not None and mfu.verdict in (Verdict.DIFFERENT, Verdict.INDISTINGUISHABLE)
    missing = compare([BASE_7B], [OFF_PPL_7B], indicators=["no/such/metric", "entropy"])
    assert missing.skipped == ("no/such/metric: logged by neither side",)
    assert [c.name for c in missing.indicators] == ["entropy"]


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one"):
        compare([], [BASE_7B])
    with pytest.raises(ValueError, match="alpha"):
        compare([BASE_7B], [BASE_7B], alpha=1.5)
    with pytest.raises(ValueError, match="window"):
        compare([BASE_7B], [BASE_7B], window=0)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="no runs could be read from the candidate"):
        compare([BASE_7B], [empty])


def test_the_documented_example_is_what_compare_prints() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "compare-example.md").read_text("utf-8")
    printed = doc.split("```console\n")[1].split("```")[0].split("\n", 2)[2]
    result = replace(compare([BASE_7B], [OFF_PPL_7B]), out=Path("compare.html"))
    assert printed.rstrip("\n") == format_table(result)


def test_one_run_against_a_group_uses_the_groups_spread() -> None:
    base = group("b", range(300, 301))
    cand = group("c", range(400, 400 + SEEDS), Fault("entropy_collapse", 200))
    result = compare_runs(base, cand)
    entropy = result.get("entropy")
    assert result.mode == "seeds" and "1 baseline vs 6 candidate runs" in result.basis
    assert entropy is not None and entropy.verdict is Verdict.WORSE


def test_no_row_says_indistinguishable_beside_an_interval_that_excludes_zero() -> None:
    result = compare([BASE_7B], [OFF_PPL_7B])
    lines = {line.split()[0]: line for line in format_table(result).splitlines() if line}
    shifted = [c for c in result.indicators if c.ci[0] > 0 or c.ci[1] < 0]
    assert any(c.verdict is Verdict.INDISTINGUISHABLE for c in shifted)  # the case exists
    for c in shifted:
        assert "indistinguishable" not in lines[c.name], lines[c.name]
    for c in result.indicators:
        if c.verdict is Verdict.INDISTINGUISHABLE and c not in shifted:
            assert "indistinguishable" in lines[c.name]


def test_the_html_plot_titles_say_what_the_verdict_table_says(tmp_path: Path) -> None:
    from streamwatch.report.table import verdict_text

    out = tmp_path / "compare.html"
    result = compare([BASE_7B], [OFF_PPL_7B], out=out)
    page = out.read_text("utf-8")
    shifted = [c for c in result.indicators if verdict_text(c).startswith("end shift")]
    assert shifted  # the case exists
    for c in result.indicators:
        words = verdict_text(c)
        assert f">{words}</td>" in page, c.name
        assert f'"{c.name}: {words}' in page, c.name
    for c in shifted:
        assert f'"{c.name}: indistinguishable' not in page, c.name
