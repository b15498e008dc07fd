"""What every sink is: something that takes incident updates, one at a time."""

from __future__ import annotations

from typing import Protocol

from streamwatch.incidents import Incident

__all__ = ["Sink"]


class Sink(Protocol):
    """Receives each incident update as the engine emits it (``send`` must not block long).

    A sink may also have ``close()`` and ``run_ended(run_id)`` (a run's end-of-run marker
    arrived); the live service calls them when present.
    """

    def send(self, inc: Incident) -> None: ...
