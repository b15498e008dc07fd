"""The intervention ledger: a baseline and candidate runs judged on every health indicator,
its table and its HTML page, kept live by the service.

May import report (its comparisons), replay, sources, simulate and the engine; never live or cli.
"""
