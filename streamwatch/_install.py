"""The package's distribution name, and the command that adds one of its extras.

The import package and the command are ``streamwatch``; the distribution on PyPI is
``streamwatch-rl`` (``streamwatch`` there is another project). Run from a source checkout,
an extra is added to the checkout itself (``pip install -e '.[report]'``), not fetched.

>>> hint_for("report", None)
"pip install 'streamwatch-rl[report]'"
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DISTRIBUTION", "EXTRAS", "hint_for", "install_hint", "source_checkout"]

DISTRIBUTION = "streamwatch-rl"

#: Optional dependencies a command may miss -> the extra that brings it.
EXTRAS = {
    "plotly": "report",
    "scipy": "report",
    "kafka": "kafka",
    "prometheus_client": "kafka",
    "tensorboard": "tensorboard",
    "wandb": "wandb",
}


def source_checkout() -> Path | None:
    """The project directory when this package is imported from its source tree, else None."""
    root = Path(__file__).resolve().parent.parent
    try:
        pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    return root if f'name = "{DISTRIBUTION}"' in pyproject else None


def install_hint(extra: str) -> str:
    """The one command that installs ``extra`` where this package comes from."""
    return hint_for(extra, source_checkout())


def hint_for(extra: str, checkout: Path | None) -> str:
    """The command that installs ``extra``: into ``checkout`` (editable), else from PyPI."""
    if checkout is None:
        return f"pip install '{DISTRIBUTION}[{extra}]'"
    where = "." if Path.cwd().resolve() == checkout.resolve() else os.fspath(checkout)
    return f"pip install -e '{where}[{extra}]'"
