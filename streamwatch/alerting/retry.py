"""Retry decisions for one message: pure functions of a send result, the attempt number and
the elapsed time, with the random draw for the jitter passed in.

- 2xx: delivered.
- 429 and 5xx, timeouts, refused or reset connections: retried with exponential backoff and
  jitter, no sooner than the receiver's ``Retry-After`` (seconds or an HTTP date).
- other 4xx (and 3xx: webhooks are not followed): final; recorded, never retried.
- after ``max_attempts`` tries or ``max_retry_seconds``: exhausted (the outbox decides what
  that means: set aside, or the receiver is down).

>>> from streamwatch.alerting.config import DeliveryConfig
>>> policy = DeliveryConfig(backoff_initial=1.0, backoff_multiplier=2.0, jitter=0.0)
>>> [backoff_delay(n, policy, u=0.5) for n in (1, 2, 3)]
[1.0, 2.0, 4.0]
>>> plan_retry(SendResult.http(429, "rate limited", retry_after=5.0), attempt=1,
...     elapsed=0.0, policy=policy, u=0.0)
RetryPlan(action='retry', delay=5.0, reason='HTTP 429 (rate limited); retry in 5.00 s')
>>> plan_retry(SendResult.http(400, "invalid_payload"), attempt=1, elapsed=0.0,
...     policy=policy, u=0.0).action
'fail'
>>> parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0)
10.0
"""

from __future__ import annotations

import email.utils
from dataclasses import dataclass
from typing import Literal

from streamwatch.alerting.config import DeliveryConfig

__all__ = ["RetryPlan", "SendResult", "backoff_delay", "parse_retry_after", "plan_retry"]


@dataclass(frozen=True, slots=True)
class SendResult:
    """What one HTTP attempt gave. ``reason`` is already redacted."""

    ok: bool
    retryable: bool
    status: int | None
    reason: str
    retry_after: float | None = None

    @classmethod
    def http(cls, status: int, detail: str = "", retry_after: float | None = None) -> SendResult:
        ok = 200 <= status < 300
        retryable = status == 429 or status >= 500
        reason = f"HTTP {status}" + (f" ({detail})" if detail else "")
        return cls(ok, retryable and not ok, status, reason, retry_after)

    @classmethod
    def error(cls, reason: str, *, retryable: bool = True) -> SendResult:
        return cls(False, retryable, None, reason)


@dataclass(frozen=True, slots=True)
class RetryPlan:
    action: Literal["delivered", "retry", "fail", "exhausted"]
    delay: float
    reason: str


def backoff_delay(attempt: int, policy: DeliveryConfig, u: float) -> float:
    """Delay after the ``attempt``-th failure: exponential, capped, minus up to ``jitter`` of
    itself at random (``u`` in [0, 1))."""
    base = policy.backoff_initial * policy.backoff_multiplier ** (attempt - 1)
    return min(policy.backoff_max, base) * (1.0 - policy.jitter * u)


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now)


def plan_retry(
    result: SendResult, *, attempt: int, elapsed: float, policy: DeliveryConfig, u: float
) -> RetryPlan:
    if result.ok:
        return RetryPlan("delivered", 0.0, result.reason)
    if not result.retryable:
        return RetryPlan("fail", 0.0, f"final: {result.reason}")
    delay = backoff_delay(attempt, policy, u)
    if result.retry_after is not None:
        delay = max(delay, min(result.retry_after, policy.max_retry_after))
    if attempt >= policy.max_attempts:
        why = f"gave up after {attempt} attempt(s): {result.reason}"
        return RetryPlan("exhausted", delay, why)
    if elapsed + delay > policy.max_retry_seconds:
        why = f"gave up after {elapsed:.2f} s ({result.reason}; next try in {delay:.2f} s)"
        return RetryPlan("exhausted", delay, why)
    return RetryPlan("retry", delay, f"{result.reason}; retry in {delay:.2f} s")
