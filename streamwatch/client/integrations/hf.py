"""Hugging Face ``Trainer`` and TRL: a callback that publishes the trainer's logs.

    from streamwatch.client.integrations.hf import StreamwatchCallback

    trainer = GRPOTrainer(..., callbacks=[StreamwatchCallback("kafka:9092", run_id="grpo-a")])

Each ``on_log`` (every ``logging_steps``) publishes the numeric entries of the logs at
``state.global_step``; TRL's names (``reward``, ``completions/mean_length``, ``entropy``...)
are in streamwatch's ``trl`` preset. By default only the main process publishes (the
trainer's logs are already averaged over processes); ``every_process=True`` publishes from
each, with its rank. ``on_train_end`` closes the publisher, which sends the end-of-run
marker. Its events are tagged with the trainer's ``world_size`` (its processes, one a GPU;
generation servers apart), which an incident's cost counts as the run's GPUs. The callback
subclasses ``transformers.TrainerCallback`` when transformers is
installed, and is otherwise a plain object with the same hooks.

Stop requests: the callback also listens on the control topic (``stop_requests=False``
turns that off). When the service's ``[[actions]]`` ask this run to stop, the next
``on_step_end`` sets ``control.should_save = True`` and ``control.should_training_stop =
True``: the Trainer saves a checkpoint at that step, then ends training as if it had reached
its last step (``on_train_end`` follows, which sends the end-of-run marker). The flag is
read from memory at every step, so training never waits for the broker.
"""

from __future__ import annotations

from typing import Any

from streamwatch.client.publish import Publisher

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
        stop_requests: bool = True,
        **publisher_options: Any,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.run_id = run_id
        self.every_process = every_process
        self.stop_requests = stop_requests
        self.publisher_options = publisher_options
        self.publisher: Publisher | None = None
        #: the step at which a stop request was turned into save-then-stop (None: not yet)
        self.stopped_at: int | None = None

    def _publisher(self, args: Any = None) -> Publisher:
        if self.publisher is None:
            options = dict(self.publisher_options)
            world = getattr(args, "world_size", None)
            if isinstance(world, int) and world >= 1:
                # the trainer's processes, one a GPU: what an incident's cost counts (the
                # caller's own tags win)
                options["tags"] = {"world_size": str(world), **(options.get("tags") or {})}
            self.publisher = Publisher(
                self.bootstrap_servers,
                self.run_id,
                stop_requests=self.stop_requests,
                **options,
            )
        return self.publisher

    def on_train_begin(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        if self.stop_requests and self._publishes(state):
            self._publisher(args)  # listen for stop requests from the first step on

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
        self._publisher(args).log(metrics, step=int(state.global_step))

    def on_step_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        """A stop request came: checkpoint at this step, then stop."""
        pub = self.publisher
        if pub is None or not pub.stop_requested:
            return
        control.should_save = True
        control.should_training_stop = True
        if self.stopped_at is None:
            self.stopped_at = int(state.global_step)

    def on_train_end(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        if self.publisher is not None:
            self.publisher.close()
            self.publisher = None
