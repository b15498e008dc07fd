"""Notifiers: build a receiver's payload from a message (pure), and post it (I/O).

- :mod:`~streamwatch.alerting.notify.slack`: Slack incoming webhooks (Block Kit)
- :mod:`~streamwatch.alerting.notify.webhook`: JSON webhooks, streamwatch v1 or Alertmanager v4
- :mod:`~streamwatch.alerting.notify.discord`: Discord webhooks (embeds)
- :mod:`~streamwatch.alerting.notify.email`: email over SMTP with STARTTLS, and its poster
- :mod:`~streamwatch.alerting.notify.http`: the HTTP poster, which classifies failures
- :mod:`~streamwatch.alerting.notify.proxy`: the proxy the environment names for a URL
"""
