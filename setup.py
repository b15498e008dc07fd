"""The optional compiled build: ``STREAMWATCH_COMPILE=1`` compiles the engine's hot modules
(the same source) with mypyc into C extensions. Without the variable the install is pure
Python. It needs mypy (which ships mypyc), a C compiler and the Python headers::

    pip install mypy setuptools
    STREAMWATCH_COMPILE=1 pip install --no-build-isolation .
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup

#: The hot path: the engine's per-value work (pydantic models stay interpreted).
COMPILED = [
    "streamwatch/monitor.py",
    "streamwatch/run.py",
    "streamwatch/indicators.py",
    "streamwatch/cost.py",
    "streamwatch/findings.py",
    *sorted(str(p) for p in Path("streamwatch/checks").glob("*.py") if p.name != "__init__.py"),
    *sorted(str(p) for p in Path("streamwatch/detectors").glob("*.py") if p.name != "__init__.py"),
]

if __name__ == "setup_modules":  # read by a test for the list above
    pass
elif os.environ.get("STREAMWATCH_COMPILE", "") == "1":
    from mypyc.build import mypycify

    setup(
        ext_modules=mypycify(
            ["--config-file=pyproject.toml", *COMPILED], opt_level="3", group_name="streamwatch"
        )
    )
else:
    setup()
