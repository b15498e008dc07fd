"""The compiled core (``streamwatch_native``, built from ``native/``), when it is installed.

It judges each value with compiled copies of the checks and runs the common case of the
per-event loop (see ``Monitor.process``); the Python checks in :mod:`streamwatch.checks`
are the reference, and the tests hold the two engines to the same incidents. Without the
core, or with ``STREAMWATCH_NATIVE=0`` in the environment, the engine is pure Python.
"""

from __future__ import annotations

import os
from types import ModuleType


def _load() -> ModuleType | None:
    if os.environ.get("STREAMWATCH_NATIVE", "1") == "0":
        return None
    try:
        import streamwatch_native
    except ImportError:
        return None
    return streamwatch_native


core = _load()
