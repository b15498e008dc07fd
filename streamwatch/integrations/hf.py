"""Hugging Face ``Trainer`` and TRL: a callback that publishes the trainer's logs.

    from streamwatch.integrations.hf import StreamwatchCallback

    trainer = GRPOTrainer(..., callbacks=[StreamwatchCallback("kafka:9092", run_id="grpo-a")])

Each ``on_log`` (every ``logging_steps``) publishes the numeric entries of the logs at
``state.global_step``; TRL's names (``reward``, ``completions/mean_length``, ``entropy``...)
are in streamwatch's ``trl`` preset. By default only the main process publishes (the
trainer's logs are already averaged over processes); ``every_process=True`` publishes from
each, with its rank. ``on_train_end`` closes the publisher, which sends the end-of-run
marker. The callback subclasses ``transformers.TrainerCallback`` when transformers is
installed, and is otherwise a plain object with the same hooks.
"""

from __future__ import annotations

from typing import Any

from streamwatch.publish import Publisher

try:
    from transformers import TrainerCallback as _Base  # type: ignore[import-not-found]
except ImportError:  # the hooks below are all the Trainer calls that matter here
    _Base = object

__all__ = ["StreamwatchCallback", "trainer_metrics"]


def trainer_metrics(logs: dict[str, Any]) -> dict[str, float]:
    """The metrics of one ``on_log`` call: its numbers, NaN included. Text, flags and ``None``
    are not metrics: TRL logs ``None`` for a reward function that scored nothing in the window,
    which means no value (as replaying the run's trainer_state.json reads its ``null``).

    >>> trainer_metrics({"loss": 0.1, "rewards/fmt/mean": None, "note": "x", "flag": True})
    {'loss': 0.1}
    """
    return {k: v for k, v in logs.items() if isinstance(v, int | float) and not isinstance(v, bool)}


class StreamwatchCallback(_Base):  # type: ignore[misc]
    """Publish ``Trainer`` logs to streamwatch (see the module documentation)."""

    def __init__(
        self,
        bootstrap_servers: str | list[str],
        run_id: str,
        *,
        every_process: bool = False,
        **publisher_options: Any,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.run_id = run_id
        self.every_process = every_process
        self.publisher_options = publisher_options
        self.publisher: Publisher | None = None

    def _publishes(self, state: Any) -> bool:
        return self.every_process or bool(getattr(state, "is_world_process_zero", True))

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **_: Any
    ) -> None:
        if not logs or not self._publishes(state):
            return
        metrics = trainer_metrics(logs)
        if not metrics:
            return
        if self.publisher is None:
            self.publisher = Publisher(
                self.bootstrap_servers, self.run_id, **self.publisher_options
            )
        self.publisher.log(metrics, step=int(state.global_step))

    def on_train_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        if self.publisher is not None:
            self.publisher.close()
            self.publisher = None
