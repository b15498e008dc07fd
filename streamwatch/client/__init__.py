"""The training-side client: runs inside the training job (publisher, stop control, integrations).

Imports only :mod:`streamwatch.markers` and the standard library at import time (kafka-python
on first use, on its own thread): never the engine, river, numpy or pydantic.
"""
