"""Fixtures shared by the test modules."""

from __future__ import annotations

import os

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
