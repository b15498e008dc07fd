"""The ``${NAME}`` references of a config file (a receiver's ``url`` or ``secret`` read from
the environment) that are unset, and stand-ins for them, so that a config can be checked
offline (``check-config``) and the routes tried without sending (``test-route --dry-run``)
on a machine that has none of the secrets.

>>> import os, tempfile, pathlib
>>> path = pathlib.Path(tempfile.mkdtemp()) / "c.toml"
>>> _ = path.write_text('url = "${SW_DOCTEST_HOOK}"')
>>> unset_references(path)
['SW_DOCTEST_HOOK']
>>> with stand_ins(["SW_DOCTEST_HOOK"]):
...     os.environ["SW_DOCTEST_HOOK"]
'https://unset.invalid/SW_DOCTEST_HOOK'
>>> "SW_DOCTEST_HOOK" in os.environ
False
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["stand_ins", "unset_references"]

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def unset_references(path: str | Path | None) -> list[str]:
    """The variables the file refers to as ``${NAME}`` that are not set, in name order (none
    for no file, or one that cannot be read: loading it says why); lines commented out with
    ``#`` are passed over."""
    if path is None:
        return []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        return []
    live = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    return sorted({n for n in _ENV_REF.findall(live) if n not in os.environ})


@contextmanager
def stand_ins(names: list[str]) -> Iterator[None]:
    """Unset variables set, while inside, to a URL that goes nowhere (``.invalid``)."""
    for name in names:
        os.environ[name] = f"https://unset.invalid/{name}"
    try:
        yield
    finally:
        for name in names:
            os.environ.pop(name, None)
