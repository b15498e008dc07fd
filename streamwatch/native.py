"""The compiled core (``streamwatch_native``, built from ``native/``), when it is installed.

It judges each value with compiled copies of the checks and runs the common case of the
per-event loop (see ``Monitor.process``); the Python checks in :mod:`streamwatch.checks`
are the reference, and the tests hold the two engines to the same incidents. Without the
core, or with ``STREAMWATCH_NATIVE=0`` in the environment, the engine is pure Python.
"""

from __future__ import annotations

import os

__all__ = ["core"]

# typed as the module: every use checks ``core is not None`` first
try:
    import streamwatch_native as core
except ImportError:  # not built (no Rust toolchain where it was installed)
    core = None  # type: ignore[assignment]
if os.environ.get("STREAMWATCH_NATIVE", "1") == "0":
    core = None  # type: ignore[assignment]
