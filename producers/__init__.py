"""Runnable producer programs that publish metric events to Kafka.

``python -m producers.cluster``: a fake multi-node training cluster, one process per rank.
"""
