"""streamwatch: a real-time health monitor for reinforcement-learning training of LLMs."""

__version__ = "0.1.0"


def build() -> str:
    """Which build of the engine is installed: ``"compiled (mypyc)"`` when its hot modules are
    C extensions (``STREAMWATCH_COMPILE=1`` at install), else ``"pure Python"``. Imports
    nothing.

    >>> build() in ("compiled (mypyc)", "pure Python")
    True
    """
    from importlib.util import find_spec

    spec = find_spec("streamwatch.monitor")
    origin = spec.origin if spec is not None else None
    return "compiled (mypyc)" if origin and not origin.endswith(".py") else "pure Python"
