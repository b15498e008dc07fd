"""The training side of the control topic: notice a stop request without blocking training.

:class:`StopListener` reads the control topic on its own daemon thread (kafka-python is
imported there) and sets a flag when a stop request for its run arrives; the training loop
reads the flag (:attr:`StopListener.stop_requested`), which costs an attribute look-up. It
reads from the time it was created on, so a request made for an earlier attempt of the run
is not taken for one made now; a topic that does not exist yet is looked for again every
few seconds. Light, like :mod:`streamwatch.client.publish`: no numpy, pydantic or river.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from streamwatch.client.control import DEFAULT_CONTROL_TOPIC, is_stop_for, parse

__all__ = ["StopListener", "close_clients", "track_clients"]

_log = logging.getLogger(__name__)
_POLL_MS = 200
_RETRY_S = 2.0


def track_clients(config: dict[str, Any], kind: Any) -> list[Any]:
    """Make the kafka-python client ``kind`` (KafkaProducer, KafkaConsumer) about to be
    created from ``config`` note the network clients it makes, for :func:`close_clients`."""
    created: list[Any] = []
    make_client = config.get("kafka_client") or kind.DEFAULT_CONFIG["kafka_client"]

    def client(**kwargs: Any) -> Any:
        made = make_client(**kwargs)
        created.append(made)
        return made

    config["kafka_client"] = client
    return created


def close_clients(created: list[Any]) -> None:
    """kafka-python leaves the client of a failed start open (its sockets, selector and
    wake-up pipe): close them, or every failed bootstrap leaks them."""
    for made in created:
        with contextlib.suppress(Exception):
            made.close()


class StopListener:
    """Listens for stop requests for ``run_id`` on ``topic``; see the module documentation."""

    def __init__(
        self,
        bootstrap_servers: list[str],
        run_id: str,
        *,
        topic: str = DEFAULT_CONTROL_TOPIC,
        consumer_config: dict[str, Any] | None = None,
        clock: Any = time.time,
        reachable: Callable[[], bool] = lambda: True,
    ) -> None:
        self.run_id = run_id
        self.topic = topic
        self._servers = list(bootstrap_servers)
        self._config = dict(consumer_config or {})
        self._reachable = reachable  # checked first: a refused bootstrap leaks sockets
        self._since_ms = int(clock() * 1000)
        self._key = run_id.encode()
        self._requested = threading.Event()
        self._request: dict[str, Any] | None = None
        self._stop = threading.Event()
        self.error = ""  # the last error, while the topic cannot be read
        self._thread = threading.Thread(target=self._run, name="streamwatch-control", daemon=True)
        self._thread.start()

    @property
    def stop_requested(self) -> bool:
        return self._requested.is_set()

    @property
    def request(self) -> dict[str, Any] | None:
        """The stop request (``reason``, ``step``, ``incident``...), once one came."""
        return self._request

    @property
    def reason(self) -> str | None:
        request = self._request
        return None if request is None else str(request.get("reason", ""))

    def wait(self, timeout: float) -> bool:
        """Block until a stop request comes (for tests and scripts; training loops read
        :attr:`stop_requested`)."""
        return self._requested.wait(timeout)

    def close(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    # -- the thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            import kafka
        except ImportError as exc:
            self.error = f"kafka-python is not importable: {exc}"
            _log.warning("streamwatch control for run %r: %s", self.run_id, self.error)
            return
        while not self._stop.is_set() and not self._requested.is_set():
            consumer = None
            try:
                consumer = self._open(kafka)
                if consumer is not None:
                    self._read(consumer)
            except Exception as exc:  # the broker went away: try again
                self.error = f"{type(exc).__name__}: {exc}"
            finally:
                if consumer is not None:
                    with contextlib.suppress(Exception):
                        consumer.close()
            self._stop.wait(_RETRY_S)

    def _open(self, kafka: Any) -> Any:
        if not self._reachable():
            self.error = "no broker reachable"
            return None
        config = {"enable_auto_commit": False, "group_id": None, **self._config}
        created = track_clients(config, kafka.KafkaConsumer)
        try:
            consumer = kafka.KafkaConsumer(bootstrap_servers=self._servers, **config)
        except Exception:
            close_clients(created)
            raise
        try:
            parts = consumer.partitions_for_topic(self.topic)
            if not parts:
                self.error = f"topic {self.topic} does not exist (yet)"
                consumer.close()
                return None
            tps = [kafka.TopicPartition(self.topic, p) for p in sorted(parts)]
            consumer.assign(tps)
            found = consumer.offsets_for_times({tp: self._since_ms for tp in tps})
            for tp in tps:
                at = found.get(tp)
                if at is None:
                    consumer.seek_to_end(tp)
                else:
                    consumer.seek(tp, at.offset)
        except Exception:
            consumer.close()
            raise
        self.error = ""
        return consumer

    def _read(self, consumer: Any) -> None:
        while not self._stop.is_set():
            batches = consumer.poll(timeout_ms=_POLL_MS)
            for records in batches.values():
                for record in records:
                    if record.key != self._key:
                        continue
                    message = parse(record.value)
                    if message is not None and is_stop_for(message, self.run_id):
                        self._request = message
                        self._requested.set()
                        _log.warning(
                            "streamwatch: stop requested for run %r at step %s: %s",
                            self.run_id,
                            message.get("step"),
                            message.get("reason"),
                        )
                        return
