"""The HTTP proxy a receiver's URL goes through, from the environment.

``HTTPS_PROXY`` for https:// receivers (Slack), ``HTTP_PROXY`` for http:// ones, either in
lower or upper case; ``NO_PROXY`` lists the hosts reached directly (``*``, host names, domain
suffixes such as ``.corp``, ``host:port``), matched by Python's
:func:`urllib.request.proxy_bypass_environment` (the rules of curl and requests). https://
receivers go through the proxy in a ``CONNECT`` tunnel (TLS end to end: the proxy sees only
the host); http:// ones as a forwarded request. Credentials in the proxy URL
(``http://user:pw@proxy:3128``) are sent as ``Proxy-Authorization: Basic`` and never shown:
:func:`describe` gives the host only.

>>> env = {"https_proxy": "http://user:pw@proxy.corp:3128", "no_proxy": "localhost,.internal"}
>>> p = proxy_for("https://hooks.slack.com/services/T0/B1/X", env)
>>> (p.host, p.port, p.authorization)
('proxy.corp', 3128, 'Basic dXNlcjpwdw==')
>>> describe(p)
'http://proxy.corp:3128'
>>> proxy_for("https://alerts.internal/hook", env) is None
True
>>> proxy_for("http://example.com/hook", env) is None  # no HTTP_PROXY: direct
True
"""

from __future__ import annotations

import base64
import os
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

__all__ = ["Proxy", "ProxyError", "describe", "proxy_for"]

_DEFAULT_PORT = 8080


class ProxyError(ValueError):
    """A proxy setting that cannot be used (the text names the variable, not its secret)."""


@dataclass(frozen=True, slots=True)
class Proxy:
    host: str
    port: int
    authorization: str | None = None  # the Proxy-Authorization header's value


def describe(proxy: Proxy | None) -> str:
    return "direct" if proxy is None else f"http://{proxy.host}:{proxy.port}"


def _environment(env: Mapping[str, str] | None) -> dict[str, str]:
    """``{scheme: proxy}`` and ``{"no": ...}`` from ``*_PROXY`` variables, as urllib reads
    them: any case, the lower-case spelling winning, an empty value meaning none."""
    env = os.environ if env is None else env
    proxies: dict[str, str] = {}
    for lower_wins in (False, True):
        for name, value in env.items():
            if name.lower().endswith("_proxy") and (name.islower() or not lower_wins):
                key = name.lower()[: -len("_proxy")]
                if value:
                    proxies[key] = value
                elif lower_wins:
                    proxies.pop(key, None)
    return proxies


def proxy_for(url: str, env: Mapping[str, str] | None = None) -> Proxy | None:
    """The proxy for ``url`` under ``env`` (default: the process environment); None: direct."""
    parts = urlsplit(url)
    proxies = _environment(env)
    scheme = parts.scheme.lower()
    setting = proxies.get(scheme)
    if not setting:
        return None
    host = parts.hostname or ""
    target = f"{host}:{parts.port}" if parts.port else host
    if "no" in proxies and _bypass(target, proxies):
        return None
    name = f"{scheme.upper()}_PROXY"
    if "://" not in setting:
        setting = "http://" + setting
    try:
        p = urlsplit(setting)
        port = p.port or _DEFAULT_PORT
    except ValueError:
        raise ProxyError(f"{name}: not a valid proxy URL") from None
    if p.scheme != "http" or not p.hostname:
        raise ProxyError(f"{name}: must be an http:// proxy URL with a host (got {p.scheme}://)")
    auth = None
    if p.username is not None:
        pair = f"{unquote(p.username)}:{unquote(p.password or '')}".encode()
        auth = "Basic " + base64.b64encode(pair).decode("ascii")
    return Proxy(p.hostname, port, auth)


def _bypass(target: str, proxies: dict[str, str]) -> bool:
    # public in urllib.request (documented with getproxies), missing from typeshed
    return bool(urllib.request.proxy_bypass_environment(target, proxies))  # type: ignore[attr-defined]
