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

Without Kafka: ``StreamwatchCallback(None, "grpo-a", local_log="grpo-a.jsonl")`` appends
each logged step to a JSONL file of the event contract (flushed per step, the end-of-run
marker last), which ``streamwatch watch grpo-a.jsonl`` follows; ``local_log`` also works
beside Kafka.

Stop requests: the callback also listens on the control topic (``stop_requests=False``
turns that off). When the service's ``[[actions]]`` ask this run to stop, or a stop file
appears (``stop_file=``, else env ``STREAMWATCH_STOP_FILE``), or the process gets
``stop_signal`` (SIGUSR1 by default: ``kill -USR1 <pid>``), the next ``on_step_end`` sets
``control.should_save = True`` and ``control.should_training_stop = True``: the Trainer
saves a checkpoint at that step, then ends training as if it had reached its last step
(``on_train_end`` follows, which sends the end-of-run marker). The flags are read from
memory at every step (and the file's existence), so training never waits for the
broker. In a run of several processes, the stop file reaches them all; a signal must be
sent to each.
"""

from __future__ import annotations

import importlib
from typing import Any

from streamwatch.client.integrations.hooks import TrainerHooks, trainer_metrics

# Looked up by name, so that the module type-checks the same with transformers or without.
_Base: Any
try:
    _Base = importlib.import_module("transformers").TrainerCallback
except ImportError:  # the hooks of TrainerHooks are all the Trainer calls that matter here
    _Base = object

__all__ = ["StreamwatchCallback", "trainer_metrics"]


class StreamwatchCallback(TrainerHooks, _Base):  # type: ignore[misc]
    """Publish ``Trainer`` logs to streamwatch (see the module documentation and
    :class:`~streamwatch.client.integrations.hooks.TrainerHooks` for the options)."""
