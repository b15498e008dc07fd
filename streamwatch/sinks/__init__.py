"""Where incidents go: console, JSONL files (and, for the live service, Kafka and HTTP)."""

from streamwatch.sinks.base import Sink
from streamwatch.sinks.console import ConsoleSink, format_incident
from streamwatch.sinks.jsonl import JsonlSink

__all__ = ["ConsoleSink", "JsonlSink", "Sink", "format_incident"]
