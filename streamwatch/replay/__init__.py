"""Recorded and followed logs through the engine: ``replay`` (whole files), ``watch`` (files
as they grow), and the per-run tallies both print.

May import sources, sinks, the engine, alerting's wording and actions; never live, report,
ledger or cli.
"""
