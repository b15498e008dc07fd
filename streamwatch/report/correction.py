"""Corrections for many comparisons: which hypotheses of a family are rejected, and at what
level each was tested.

- ``holm`` (Holm 1979): the family-wise error rate stays at ``alpha`` (the chance of even one
  false "better" or "worse" in the whole ledger), uniformly more powerful than Bonferroni. The
  i-th smallest of m p-values is tested at ``alpha / (m - i + 1)``, in order, stopping at the
  first kept.
- ``bh`` (Benjamini-Hochberg 1995): the false discovery rate (the expected share of false
  findings among those reported) stays at ``alpha``; more findings, a few of them false.
  Every p-value at or below ``k alpha / m`` is rejected, k the largest rank for which the
  k-th smallest p-value is.

Each function returns, per hypothesis, the level at which it was rejected (None: kept), so
that a rejected hypothesis can be followed up at that level (the ledger's onset search).

>>> holm({"a": 0.001, "b": 0.02, "c": 0.04}, 0.05)
{'a': 0.016666666666666666, 'b': 0.025, 'c': 0.05}
>>> holm({"a": 0.001, "b": 0.03, "c": 0.04}, 0.05)
{'a': 0.016666666666666666, 'b': None, 'c': None}
>>> bh({"a": 0.001, "b": 0.03, "c": 0.04}, 0.05)
{'a': 0.05, 'b': 0.05, 'c': 0.05}
"""

from __future__ import annotations

import math
from collections.abc import Mapping

__all__ = ["CORRECTIONS", "bh", "correct", "holm"]

#: the correction's name -> what it controls, as the ledger says it
CORRECTIONS = {
    "holm": "Holm's step-down correction (family-wise error rate)",
    "bh": "Benjamini-Hochberg (false discovery rate)",
}


def _ordered(p: Mapping[str, float]) -> list[tuple[str, float]]:
    """Hypotheses by ascending p-value; a NaN p-value is no evidence (1.0)."""
    clean = {k: (v if math.isfinite(v) else 1.0) for k, v in p.items()}
    return sorted(clean.items(), key=lambda kv: (kv[1], kv[0]))


def holm(p: Mapping[str, float], alpha: float) -> dict[str, float | None]:
    """Holm's step-down test of a family: the level each hypothesis was rejected at, or None."""
    out: dict[str, float | None] = {k: None for k in p}
    m = len(p)
    for i, (key, value) in enumerate(_ordered(p)):
        level = alpha / (m - i)
        if value > level:
            break
        out[key] = level
    return out


def bh(p: Mapping[str, float], alpha: float) -> dict[str, float | None]:
    """Benjamini-Hochberg's step-up test: the level ``k alpha / m`` for each rejected one."""
    out: dict[str, float | None] = {k: None for k in p}
    ordered = _ordered(p)
    m = len(ordered)
    k = max((i + 1 for i, (_, v) in enumerate(ordered) if v <= (i + 1) * alpha / m), default=0)
    for key, _ in ordered[:k]:
        out[key] = alpha * (k / m)
    return out


def correct(p: Mapping[str, float], alpha: float, method: str) -> dict[str, float | None]:
    """``holm`` or ``bh`` by name."""
    if method == "holm":
        return holm(p, alpha)
    if method == "bh":
        return bh(p, alpha)
    raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, got {method!r}")
