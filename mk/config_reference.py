"""Write docs/configuration.md from the code: every config table's keys (streamwatch/config.py)
and every command's options with their ``STREAMWATCH_*`` variables (streamwatch/cli/env.py).

Run ``python mk/config_reference.py`` after changing either; ``tests/test_docs.py`` checks the
page is current.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from streamwatch.cli.args import build_parser
from streamwatch.cli.commands import COMMANDS
from streamwatch.cli.env import prepare
from streamwatch.config import Config

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"

HEAD = """# Configuration and environment variables

<!-- written by mk/config_reference.py from streamwatch/config.py and the commands' options:
edit those, then run `python mk/config_reference.py` -->

A config file is TOML (`--config streamwatch.toml`; `examples/streamwatch.toml` is an
annotated one). Its tables are `[engine]` (and one table per check under it),
`[indicators]`, `[alerting]`, `[[actions]]` and `[[rules]]`; a command reads only the tables
it uses, and `streamwatch check-config FILE` validates a file offline. A receiver's `url` or
`secret` written `"${NAME}"` is read from the environment variable NAME.

Every option of every command also reads `STREAMWATCH_<OPTION>` (`--fail-on` reads
`STREAMWATCH_FAIL_ON`, `--quiet` reads `STREAMWATCH_QUIET`: `1`/`true`/`yes` or
`0`/`false`/`no`); a flag on the command line wins. The variables are checked like the flags
(type, choices) when the command that has them runs, and a bad one is named with its value
and flag (exit 2). `streamwatch COMMAND --help` shows the same list.

## Config file: the engine and indicators
"""


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _tables(model: type[BaseModel], prefix: str, out: list[str]) -> None:
    rows: list[str] = []
    nested: list[tuple[str, type[BaseModel]]] = []
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            nested.append((name, kind))
            continue
        default: Any = field.default
        shown = "" if default is None else f"`{default!r}`"
        factory = field.default_factory
        if isinstance(factory, type):  # an empty container
            shown = f"`{factory()!r}`"
        elif factory is not None:  # decided where it runs: the meaning says how
            shown = "(this machine's)"
        rows.append(f"| `{name}` | {shown} | {_cell(field.description or '')} |")
    if rows:
        out += [f"### `[{prefix}]`", "", "| key | default | meaning |", "|---|---|---|", *rows, ""]
    for name, sub in nested:
        _tables(sub, f"{prefix}.{name}", out)


def _options(out: list[str]) -> None:
    out += ["## Command options and their variables", ""]
    for command, text in COMMANDS.items():
        parser = build_parser(command)
        prepare(parser)
        sub = next(
            a.choices[command]
            for a in parser._actions
            if isinstance(a, argparse._SubParsersAction) and command in a.choices
        )
        rows = [
            f"| `{', '.join(a.option_strings)}` | {_cell(a.help or '')} |"
            for a in sub._actions
            if a.option_strings and not isinstance(a, argparse._HelpAction)
        ]
        out += [f"### `streamwatch {command}`", "", _cell(text), ""]
        if rows:
            out += ["| option | meaning |", "|---|---|", *rows, ""]


def render() -> str:
    out = [HEAD]
    for name, field in Config.model_fields.items():
        kind = field.annotation
        if name in ("engine", "indicators") and isinstance(kind, type):
            _tables(kind, name, out)
    out += [
        "`[alerting]` (routes, receivers, grouping, templates), `[[actions]]` and `[[rules]]`"
        " are described on [Alerts and routing](alerts.md), [Actions](actions.md) and"
        " [Your own rules](rules.md).",
        "",
    ]
    _options(out)
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    text = render()
    if sys.argv[1:] == ["--check"]:
        sys.exit(0 if PAGE.read_text(encoding="utf-8") == text else 1)
    PAGE.write_text(text, encoding="utf-8")
