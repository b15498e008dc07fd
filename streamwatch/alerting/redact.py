"""Keep webhook URLs and secrets out of logs, errors and files.

A :class:`Redactor` knows the secret strings of one receiver (the URL, its path, query and
user info, each long path segment, the signing secret) and replaces them wherever they occur;
:func:`safe_url` gives what may be shown of a URL: its scheme and host.

>>> r = Redactor(["https://hooks.example.com/services/T0/B1/XYZ123abc"], ["s3cret-key"])
>>> r("POST https://hooks.example.com/services/T0/B1/XYZ123abc failed; key s3cret-key")
'POST [redacted] failed; key [redacted]'
>>> r("token XYZ123abc leaked")
'token [redacted] leaked'
>>> safe_url("https://user:pw@hooks.example.com:8443/services/T0/B1/XYZ?x=1")
'https://hooks.example.com:8443'
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

__all__ = ["MASK", "Redactor", "safe_url"]

MASK = "[redacted]"
_MIN_SECRET = 4  # shorter fragments ("/", "v1") are not secrets, and masking them garbles text
_MIN_SEGMENT = 6


def safe_url(url: str) -> str:
    """Scheme and host (and port) only: what a log line may say about a webhook URL."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<invalid url>"
    return f"{parts.scheme or '?'}://{host}{port}"


def _url_secrets(url: str) -> list[str]:
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    found = [url, parts.path, parts.query, parts.fragment]
    found += [parts.username or "", parts.password or ""]
    found += [seg for seg in parts.path.split("/") if len(seg) >= _MIN_SEGMENT]
    found += [p.partition("=")[2] for p in parts.query.split("&")]
    found += [unquote(s) for s in found]
    if parts.path and parts.path != "/":
        found.append(url[url.find(parts.path) :])
    return found


class Redactor:
    """Replaces every known secret in a text with ``[redacted]``."""

    def __init__(self, urls: Iterable[str] = (), secrets: Iterable[str] = ()) -> None:
        found: set[str] = set()
        for url in urls:
            found.update(_url_secrets(url))
        found.update(secrets)
        # longest first, so that a URL is masked whole before its parts are
        self._secrets = sorted((s for s in found if len(s) >= _MIN_SECRET), key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def merged(self, other: Redactor) -> Redactor:
        merged = Redactor()
        merged._secrets = sorted(set(self._secrets) | set(other._secrets), key=len, reverse=True)
        return merged
