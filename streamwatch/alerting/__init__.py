"""Alerting: incident updates -> routes -> groups -> notifications -> receivers.

One concept a module, imported directly (this package imports nothing, so that
:mod:`streamwatch.alerting.config` can be used by the top-level config without pulling in
threads and HTTP):

- :mod:`~streamwatch.alerting.config`: ``AlertingConfig`` (receivers, routes, grouping...)
- :mod:`~streamwatch.alerting.route`, :mod:`~streamwatch.alerting.silence`,
  :mod:`~streamwatch.alerting.inhibit`, :mod:`~streamwatch.alerting.decide`: pure decisions,
  each returning a named reason, with ``now`` passed in
- :mod:`~streamwatch.alerting.group`: grouping, ``group_max`` splits, repeat notices
- :mod:`~streamwatch.alerting.notify`: payloads (Slack Block Kit, JSON webhook, Alertmanager v4,
  Discord embeds, email) and the HTTP and SMTP posters that classify failures as retryable
  or final, through the environment's proxy
- :mod:`~streamwatch.alerting.retry`, :mod:`~streamwatch.alerting.spool`,
  :mod:`~streamwatch.alerting.lanes`, :mod:`~streamwatch.alerting.delivery`: retries with
  backoff, the durable spool, the sent-log, one lane per run so that no message blocks another
- :mod:`~streamwatch.alerting.lock`: one process per state directory
- :mod:`~streamwatch.alerting.dispatcher`: ``Dispatcher``, the ``send(inc)``/``close()`` sink
- time comes from :mod:`streamwatch.clock` (``ManualClock`` for tests)
- :mod:`~streamwatch.alerting.testing`: a scriptable HTTP receiver for tests
- :mod:`~streamwatch.cli.alerting`: argparse helpers for the ``streamwatch`` command
"""
