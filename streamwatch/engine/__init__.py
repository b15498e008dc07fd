"""The engine: events in, incident updates out; pure and deterministic (no clock, no I/O).

May import the contracts (events, incidents, config, clock), checks, detectors and the
evaluation of a team's rules (:mod:`streamwatch.rules.evaluate`); never sources, sinks,
alerting, actions, live, report, ledger, replay, client or cli.

- :mod:`~streamwatch.engine.monitor`: :class:`Monitor`, every run of a process
- :mod:`~streamwatch.engine.series`: a run's series and how values are gathered into them
- :mod:`~streamwatch.engine.run`: :class:`RunState`, one run's checks and decisions
- :mod:`~streamwatch.engine.findings`: what a check reports; the book of a run's incidents
- :mod:`~streamwatch.engine.indicators`, :mod:`~streamwatch.engine.name_patterns`,
  :mod:`~streamwatch.engine.bindings`: metric names bound to indicators
- :mod:`~streamwatch.engine.cost`, :mod:`~streamwatch.engine.projection`: what an incident
  has cost, where a series is heading
- :mod:`~streamwatch.engine.snapshot`: one run's state as bytes, and back
"""
