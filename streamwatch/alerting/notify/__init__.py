"""Notifiers: build a receiver's payload from a message (pure), and post it (I/O).

- :mod:`~streamwatch.alerting.notify.slack`: Slack incoming webhooks (Block Kit)
- :mod:`~streamwatch.alerting.notify.webhook`: JSON webhooks, streamwatch v1 or Alertmanager v4
- :mod:`~streamwatch.alerting.notify.http`: the HTTP poster, which classifies failures
"""
