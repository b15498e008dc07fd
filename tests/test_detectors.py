"""The robust window against the textbook statistics it stands for."""

from __future__ import annotations

import math
import random
import statistics

from streamwatch.detectors import Window


def test_window_median_and_mad_match_the_statistics_module() -> None:
    rng = random.Random(1)
    for size in (1, 2, 7, 30):
        window = Window(size)
        kept: list[float] = []
        for _ in range(500):
            x = rng.gauss(0.0, 1.0) if rng.random() > 0.05 else rng.choice([math.nan, math.inf])
            if rng.random() < 0.1 and math.isfinite(x):
                x = float(round(x))  # ties
            window.update(x)
            if math.isfinite(x):
                kept = [*kept, x][-size:]
            median, sd = window.median_and_sd()
            assert median == statistics.median(kept)
            if len(kept) >= 2:
                mad = statistics.median([abs(v - median) for v in kept])
                assert sd == 1.4826 * mad
            else:
                assert math.isnan(sd)
            assert window.arrived() == kept
            assert window.full == (len(kept) == size)
