"""What ``/metrics`` and ``/healthz`` read of a running service, kept where another thread can
read it: the counts, the gauges its loop takes at every tick, and the loop's heartbeat."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from streamwatch.clock import Clock
from streamwatch.live.status import ServiceCounts
from streamwatch.sinks import Sink

__all__ = ["STUCK_S", "Vitals"]

#: A loop that has not come round for this long is reported unhealthy.
STUCK_S = 60.0


class Vitals:
    """Written by the service's loop, read by the metrics endpoint's thread."""

    def __init__(self, counts: ServiceCounts, clock: Clock, sinks: Sequence[Sink]) -> None:
        self.counts = counts
        self.clock = clock
        self.sinks = list(sinks)
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.away = False  #: the broker could not be reached at the last poll
        self._beat: float | None = None
        self._gauges: dict[str, float] = {}
        self._alerts: dict[str, int] = {}
        self._receivers: dict[tuple[str, str], int] = {}

    # -- the loop's side ------------------------------------------------------------------------
    def beat(self) -> None:
        """The loop came round."""
        self._beat = self.clock.monotonic()

    def measure(self, *, runs: int, firing: int, partitions: int, checkpoint_age: float) -> None:
        self._gauges = {
            "runs_watched": float(runs),
            "incidents_firing": float(firing),
            "partitions_owned": float(partitions),
            "checkpoint_age_seconds": checkpoint_age,
        }
        self._alerts = self._alert_outcomes()
        self._receivers = self._receiver_counts()

    def _receiver_counts(self) -> dict[tuple[str, str], int]:
        from streamwatch.alerting.dispatcher import Dispatcher

        out: dict[tuple[str, str], int] = {}
        for sink in self.sinks:
            if isinstance(sink, Dispatcher):
                for r in sink.status():
                    for state, n in (
                        ("delivered", r.delivered),
                        ("failed", r.failed),
                        ("set_aside", r.set_aside),
                        ("pending", r.pending),
                    ):
                        out[(r.name, state)] = out.get((r.name, state), 0) + n
        return out

    def _alert_outcomes(self) -> dict[str, int]:
        from streamwatch.alerting.dispatcher import Dispatcher

        out: dict[str, int] = {}
        for sink in self.sinks:
            if isinstance(sink, Dispatcher):
                try:
                    outcomes = dict(sink.stats.outcomes)  # counted on the dispatcher's thread
                except RuntimeError:  # it changed while copied: keep the last reading
                    return self._alerts
                for action, n in outcomes.items():
                    out[action] = out.get(action, 0) + n
        return out

    # -- the endpoint's side --------------------------------------------------------------------
    def gauges(self) -> dict[str, float]:
        """The gauges as the loop last took them (the lag is ``counts.lag``)."""
        return dict(self._gauges)

    def alert_outcomes(self) -> dict[str, int]:
        """Alert messages by outcome (delivered, failed, spooled, skipped), over every alert
        dispatcher among the sinks."""
        return dict(self._alerts)

    def alert_receivers(self) -> dict[tuple[str, str], int]:
        """Per (receiver, state): messages delivered, failed (refused for good), set aside
        (after their retries) and pending (queued or spooled), as the loop last read them."""
        return dict(self._receivers)

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Healthy: running, its loop coming round, the broker reachable."""
        beat = self._beat
        since = None if beat is None else self.clock.monotonic() - beat
        if self.stopped.is_set():
            status = "stopped"
        elif not self.started.is_set() or since is None:
            status = "starting"
        elif self.away:
            status = "broker_unreachable"
        elif since > STUCK_S:
            status = "stuck"
        else:
            status = "ok"
        detail: dict[str, Any] = {
            "status": status,
            "loop_seconds_ago": since,
            "lag": self.counts.lag,
            **self._gauges,
        }
        if self.counts.sink_backlog:  # degraded, not down: the service goes on
            detail["incidents_file"] = (
                f"failing: {self.counts.sink_backlog} update(s) not written "
                f"({self.counts.sink_write_errors} failed writes)"
            )
        return status == "ok", detail
