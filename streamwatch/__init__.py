"""streamwatch: a real-time health monitor for reinforcement-learning training of LLMs.

The package's map (each sub-package's docstring says what it may import; imports point down):

- :mod:`~streamwatch.cli`: the ``streamwatch`` command
- :mod:`~streamwatch.live`, :mod:`~streamwatch.report`, :mod:`~streamwatch.ledger`: the
  service; reports and comparisons; the intervention ledger
- :mod:`~streamwatch.replay`, :mod:`~streamwatch.alerting`, :mod:`~streamwatch.actions`:
  logs through the engine; notifications; what is done about an incident
- :mod:`~streamwatch.sources`, :mod:`~streamwatch.sinks`, :mod:`~streamwatch.simulate`:
  events in; incidents out; synthetic runs
- :mod:`~streamwatch.engine`, :mod:`~streamwatch.checks`, :mod:`~streamwatch.detectors`: the
  engine; the named health checks; the detectors they read
- :mod:`~streamwatch.rules`: a team's own rules (``[[rules]]``): their language, their
  evaluation in the engine, ``test-rules``
- :mod:`~streamwatch.config`, :mod:`~streamwatch.events`, :mod:`~streamwatch.incidents`,
  :mod:`~streamwatch.markers`, :mod:`~streamwatch.clock`, :mod:`~streamwatch.names`: the typed
  config, the two wire contracts, the end-of-run marker, the one wall-clock reader, the rules
  for names from producers (file names, terminal, headers, chat markup)
- :mod:`~streamwatch.client`: the training-side client, beside the rest: it imports only
  ``markers`` and the standard library
"""

from streamwatch import _moved

_moved.install()

__version__ = "0.1.0"


def build() -> str:
    """Which build of the engine is installed: ``"compiled (mypyc)"`` when its hot modules are
    C extensions (``STREAMWATCH_COMPILE=1`` at install), else ``"pure Python"``. Imports
    nothing.

    >>> build() in ("compiled (mypyc)", "pure Python")
    True
    """
    from importlib.util import find_spec

    spec = find_spec("streamwatch.engine.monitor")
    origin = spec.origin if spec is not None else None
    return "compiled (mypyc)" if origin and not origin.endswith(".py") else "pure Python"
