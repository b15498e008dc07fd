"""The ``streamwatch`` command: one module per command group, each imported when it runs.

May import every other part of the package; nothing imports it.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """The ``streamwatch`` command's entry point (:func:`streamwatch.cli.main.main`)."""
    from streamwatch.cli.main import main as run

    return run(argv)
