"""JSON decoding for event input: orjson's speed, the ``json`` module's leniency.

orjson parses an event three to six times faster than ``json``, but refuses what Python's
``json`` module itself writes for non-finite floats (bare ``NaN``, ``Infinity``), integers
beyond 64 bits and lone surrogates. Anything orjson refuses is parsed again by ``json``, so
what is accepted, and the error raised for what is not (``json.JSONDecodeError`` with its
line and column, ``UnicodeDecodeError``, ``RecursionError``), are exactly ``json``'s.

>>> loads(b'{"loss": NaN, "step": 3}')
{'loss': nan, 'step': 3}
"""

from __future__ import annotations

import json

import orjson

__all__ = ["loads"]


def loads(raw: bytes | str) -> object:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)
