"""Every option of every command also reads ``STREAMWATCH_<OPTION>``, and its help says so.

``--fail-on`` reads ``STREAMWATCH_FAIL_ON``, ``--incidents-out`` ``STREAMWATCH_INCIDENTS_OUT``,
``--quiet`` ``STREAMWATCH_QUIET`` (``1``/``true``/``yes`` or ``0``/``false``/``no``); a flag on
the command line wins. The variables of the command that runs are read, and checked like the
flags (type, choices), when it runs (:func:`read_environment`); a bad one raises
:class:`~streamwatch.config.SettingsError` naming the variable, its value and its flag, and
stops only that command. :func:`document` adds to each option's help its default and its
variable. Options whose own code reads their variable (the Kafka commands' ``env_options``,
the alert receivers', whose errors name the variable) are left to it.

>>> import os
>>> p = argparse.ArgumentParser()
>>> _ = p.add_argument("--fail-on", choices=["info", "warning", "critical"])
>>> _ = p.add_argument("--poll", type=float, default=2.0, help="read every SECONDS")
>>> prepare(p)
>>> p._actions[-1].help
'read every SECONDS (default 2.0; env STREAMWATCH_POLL)'
>>> os.environ["STREAMWATCH_FAIL_ON"] = "bogus"
>>> read_environment(p, p.parse_args(["--poll", "1"]))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
streamwatch.config.SettingsError: STREAMWATCH_FAIL_ON='bogus' (for --fail-on): ...one of info...
>>> os.environ["STREAMWATCH_FAIL_ON"] = "warning"
>>> args = p.parse_args(["--poll", "1"])
>>> read_environment(p, args)
>>> args.fail_on, args.poll
('warning', 1.0)
>>> os.environ["STREAMWATCH_POLL"] = "2.0"
>>> args = p.parse_args([])
>>> read_environment(p, args)
>>> args.fail_on, args.poll
('warning', 2.0)
>>> del os.environ["STREAMWATCH_POLL"]
>>> del os.environ["STREAMWATCH_FAIL_ON"]
"""

from __future__ import annotations

import argparse
import os
import shlex
from typing import Any

__all__ = ["document", "prepare", "read_environment"]

_PREFIX = "STREAMWATCH_"
#: Options whose own code reads their variable (and names it in its errors).
_READ_ELSEWHERE = frozenset(
    {"webhook_url", "slack_webhook_url", "webhook_secret", "alert_state_dir"}
)
_UNSET: Any = object()


def _variable(action: argparse.Action) -> str:
    return _PREFIX + action.dest.upper()


def _secret(action: argparse.Action) -> bool:
    return "secret" in action.dest or "password" in action.dest


def _parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parser and every sub-command parser under it."""
    out = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                out.extend(_parsers(sub))
    return out


def _own(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The options of ``parser`` that read their variable here."""
    handled = {o.dest for o in parser.get_default("env_options") or ()}
    return [
        a
        for a in parser._actions
        if a.option_strings
        and not isinstance(a, argparse._HelpAction | argparse._VersionAction)
        and a.dest not in handled
        and a.dest not in _READ_ELSEWHERE
    ]


def document(parser: argparse.ArgumentParser) -> None:
    """Add its default (unless empty or off) and its variable to the help of every option
    of every command; an option whose help names its variable already is left alone."""
    for p in _parsers(parser):
        for action in _own(p):
            help_text = action.help or ""
            if action.help == argparse.SUPPRESS or _PREFIX in help_text:
                continue
            extra = [f"env {_variable(action)}"]
            if _shows_default(action) and "default" not in help_text.lower():
                extra.insert(0, f"default {action.default}".replace("%", "%%"))
            action.help = f"{help_text} ({'; '.join(extra)})".lstrip()


def _shows_default(action: argparse.Action) -> bool:
    """Whether ``--help`` says the default: not for a secret, nor one that is empty or off."""
    default = action.default
    if _secret(action) or default is None or default is False:
        return False
    return not (isinstance(default, str | list | tuple) and not default)


def _chosen(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[Any]:
    """The parser and the sub-command parsers ``args`` went through."""
    out: list[Any] = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            name = getattr(args, action.dest, None)
            if name in action.choices:
                out.extend(_chosen(action.choices[name], args))
    return out


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("must be one of 1, true, yes, on, 0, false, no, off")


def prepare(parser: argparse.ArgumentParser) -> None:
    """Document every option (:func:`document`) and mark the options not given on the command
    line, for :func:`read_environment`: call it before parsing."""
    document(parser)
    for p in _parsers(parser):
        for action in _own(p):
            action._streamwatch_default = action.default  # type: ignore[attr-defined]
            if action.help and "%(default)" in action.help:  # said now: it is replaced below
                shown = str(action.default).replace("%", "%%")
                action.help = action.help.replace("%(default)s", shown).replace(
                    "%(default)r", repr(action.default).replace("%", "%%")
                )
            if action.required and _variable(action) in os.environ:
                action.required = False  # the variable stands for it
            # an append option copies its default list: None stands for "not given" there
            many = isinstance(action, argparse._AppendAction)
            action.default = None if many else _UNSET


def read_environment(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Give each option of the command that ran and was not on the command line the value
    of its set ``STREAMWATCH_*`` variable, converted and checked as the flag would be, else
    its default (the parser was :func:`prepare`-d)."""
    from streamwatch.config import SettingsError

    problems: list[str] = []
    for p in _chosen(parser, args):
        for action in _own(p):
            if not hasattr(action, "_streamwatch_default") or not hasattr(args, action.dest):
                continue
            if getattr(args, action.dest) is not action.default:
                continue  # given on the command line
            default = action._streamwatch_default
            text = os.environ.get(_variable(action))
            try:
                if text is not None:
                    value = _convert(action, text)
                elif isinstance(default, str) and callable(action.type):
                    value = action.type(default)
                else:
                    value = default
            except (ValueError, TypeError, argparse.ArgumentTypeError) as exc:
                shown = "(secret)" if _secret(action) else repr(text)
                flag = max(action.option_strings, key=len)
                problems.append(f"{_variable(action)}={shown} (for {flag}): {exc}")
                continue
            setattr(args, action.dest, value)
    if problems:
        raise SettingsError("\n".join(problems))


def _convert(action: argparse.Action, text: str) -> object:
    if isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
        value = _bool(text)
        return value if isinstance(action, argparse._StoreTrueAction) else not value
    if isinstance(action, argparse._CountAction):
        return int(text)
    many = isinstance(action, argparse._AppendAction) or action.nargs in ("+", "*")
    items = shlex.split(text) if many else [text]
    kind = action.type if callable(action.type) else str
    values = [kind(item) for item in items]
    if action.choices is not None:
        for v in values:
            if v not in action.choices:
                choices = ", ".join(map(str, action.choices))
                raise ValueError(f"{v!r} is not one of {choices}")
    return values if many else values[0]
