"""Fixtures shared by the test modules."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Iterator

import pytest


@pytest.fixture
def bootstrap() -> str:
    """The real Kafka broker `.ci/run` starts (`make kafka-up`); skip without one."""
    servers = os.environ.get("STREAMWATCH_BOOTSTRAP", "").strip()
    if not servers:
        pytest.skip(
            "STREAMWATCH_BOOTSTRAP is not set: start a broker with `make kafka-up` "
            "and export STREAMWATCH_BOOTSTRAP=127.0.0.1:19092"
        )
    return servers


@pytest.fixture
def quiet_kafka_client() -> Iterator[None]:
    """Drop kafka-python's log records while a broker is down.

    kafka-python 3.0 leaves the socket of a refused connect() unclosed, and the ERROR record
    it logs keeps that socket reachable through the exception's traceback. pytest holds an
    item's records until the item ends, so the sockets would only be finalized at exit,
    outside any filter. Without the records they are collected inside the test.
    """
    logger = logging.getLogger("kafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)
        gc.collect()
