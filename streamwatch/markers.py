"""The end-of-run marker, shared by the training-side publisher and the engine.

A process whose run completes sends one last event tagged ``{FINISHED_TAG: FINISHED_VALUE}``
with the single metric ``FINISHED_METRIC`` = 1.0 (the event contract needs one metric). The
engine then stops expecting events from the run instead of reporting it stalled. This module
imports nothing, so the publisher can use it without the engine's dependencies.
"""

__all__ = ["FINISHED_METRIC", "FINISHED_TAG", "FINISHED_VALUE"]

FINISHED_TAG = "streamwatch.state"
FINISHED_VALUE = "finished"
FINISHED_METRIC = "streamwatch/finished"
