"""The live service: Kafka in, the engine, incidents out.

- :mod:`~streamwatch.live.service`: :class:`Service`, the poll loop
- :mod:`~streamwatch.live.consumer`: the small protocols the loop needs from Kafka
- :mod:`~streamwatch.live.kafka`: kafka-python behind them
- :mod:`~streamwatch.live.ownership`: partitions held, their runs, hand-over
- :mod:`~streamwatch.live.checkpoints`: run-state checkpoints in a compacted topic
- :mod:`~streamwatch.live.commit`: the commit protocol (checkpoint, flush, commit offsets)
- :mod:`~streamwatch.live.emit`: incident updates (each once), dead letters, problems
- :mod:`~streamwatch.live.status`: the counts and the status line
- :mod:`~streamwatch.live.parts`: the parts of a running service, put together
- :mod:`~streamwatch.live.vitals`, :mod:`~streamwatch.live.metrics`: ``/metrics``
  (Prometheus) and ``/healthz``
- :mod:`~streamwatch.live.settings`: :class:`ServiceSettings`
- :mod:`~streamwatch.live.testing`: an in-memory broker for tests of the service's logic
"""

from streamwatch.live.service import ENGINE_ERROR, Service
from streamwatch.live.settings import ServiceSettings
from streamwatch.live.status import ServiceCounts

__all__ = ["ENGINE_ERROR", "Service", "ServiceCounts", "ServiceSettings"]
