"""Names from producers, made safe for where they go.

Run ids, metric names, tags and hosts come from anyone who can write to the metrics topic or
a watched log. They are names: never a path, markup, a shell word or a header. Each function
here takes such a text to one place: a file name, a terminal, a mail header, a child
process's environment, a Slack or a Discord message. The rules live here, once; the code at
each boundary calls them. Imports nothing from streamwatch.

>>> file_name("../../pwned")
'%2E.%2F..%2Fpwned'
>>> for_terminal("\\x1b[2J\\x1b[31mFAKE")
'\\\\x1b[2J\\\\x1b[31mFAKE'
>>> for_slack("<!channel> <https://x|click>")
'&lt;!channel&gt; &lt;https://x|click&gt;'
"""

from __future__ import annotations

import hashlib
import os
import re
import string
import unicodedata
from pathlib import Path

__all__ = [
    "FILE_NAME_CHARS",
    "file_name",
    "for_discord",
    "for_env",
    "for_header",
    "for_slack",
    "for_terminal",
    "path_inside",
    "template_directory",
]

#: The longest :func:`file_name` gives, in characters (all ASCII): room under the usual
#: 255-byte limit for what a template adds around it.
FILE_NAME_CHARS = 120
_HASH_CHARS = 16
_KEPT = frozenset(string.ascii_letters + string.digits + "._-")
_EMPTY = "%empty"  # escapes are upper-case hex, so no other name gives this
_ELLIPSIS = "…"

#: Characters that reorder the text around them on screen (bidirectional controls).
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(ch: str) -> str:
    return "".join(f"%{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))


def file_name(name: str) -> str:
    """One safe path component for a name: letters, digits, ``.``, ``_`` and ``-`` kept,
    every other character percent-escaped (its UTF-8 bytes), a leading dot or dash escaped
    too. No ``/``, ``\\``, NUL or control character is left, and the result is never ``.``,
    ``..``, hidden or an option. Two different names never give the same result: a name
    whose escaped form is longer than :data:`FILE_NAME_CHARS` is cut and ends in ``~`` and a
    hash of the whole name (``~`` is escaped everywhere else).

    >>> file_name("grpo-7"), file_name("a/b"), file_name("x\\x00y"), file_name(".")
    ('grpo-7', 'a%2Fb', 'x%00y', '%2E')
    >>> file_name("-rf"), file_name("50%"), file_name("")
    ('%2Drf', '50%25', '%empty')
    >>> long = file_name("r" * 500)
    >>> len(long) == FILE_NAME_CHARS, long[-17], long == file_name("r" * 501)
    (True, '~', False)
    """
    if not name:
        return _EMPTY
    parts = [ch if ch in _KEPT else _escape_char(ch) for ch in name]
    if name[0] in ".-":
        parts[0] = _escape_char(name[0])
    out = "".join(parts)
    if len(out) <= FILE_NAME_CHARS:
        return out
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_CHARS]
    head = out[: FILE_NAME_CHARS - _HASH_CHARS - 1]
    cut = head.rfind("%", len(head) - 2)
    if cut != -1:  # never half an escape
        head = head[:cut]
    return f"{head}~{digest}"


def template_directory(template: str) -> Path:
    """The fixed directory of a path template: the directory part of the text before its
    first field (the template's parent when it has none; ``.`` when it starts with one).

    >>> template_directory("/ckpt/stops/run-{run_id}.stop").as_posix()
    '/ckpt/stops'
    >>> template_directory("/ckpt/{run_id}/STOP").as_posix(), str(template_directory("{id}"))
    ('/ckpt', '.')
    """
    fixed = ""
    for literal, field, _, _ in string.Formatter().parse(template):
        fixed += literal
        if field is not None:
            return Path(os.path.dirname(fixed) or ".")
    return Path(os.path.dirname(template) or ".")


def path_inside(directory: str | os.PathLike[str], path: str | os.PathLike[str], run: str) -> Path:
    """``path`` (relative ones taken from ``directory``) resolved, links and ``..`` followed;
    raises ValueError naming the run when it is not strictly inside ``directory``.

    >>> path_inside("/srv/stops", "/srv/stops/grpo-7.stop", "grpo-7").as_posix()
    '/srv/stops/grpo-7.stop'
    >>> path_inside("/srv/stops", "../etc/passwd", "x")
    Traceback (most recent call last):
    ...
    ValueError: run 'x': the path /srv/etc/passwd is not inside /srv/stops
    """
    base = Path(directory).resolve()
    target = (base / path).resolve()
    if base not in target.parents:
        raise ValueError(f"run '{for_terminal(run)}': the path {target} is not inside {base}")
    return target


def _visible(ch: str) -> str:
    if ch in _SHORT:
        return _SHORT[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _hidden(ch: str) -> bool:
    return ch in _BIDI or unicodedata.category(ch) in ("Cc", "Cs")


def for_terminal(text: str) -> str:
    """The text with every control character (C0 and C1: ESC, CR, LF, BEL, NUL, …), lone
    surrogate and bidirectional control shown as a visible escape, so that it cannot move
    the cursor, colour the screen, or start a line of its own.

    >>> for_terminal("run\\r\\nERROR fake line\\x07\\x9b2J")
    'run\\\\r\\\\nERROR fake line\\\\x07\\\\x9b2J'
    >>> for_terminal("grpo-7 · entropy")
    'grpo-7 · entropy'
    """
    if text.isprintable():
        return text
    return "".join(_visible(ch) if _hidden(ch) else ch for ch in text)


def for_header(text: str, limit: int = 200) -> str:
    """A mail header value: no CR, LF, NUL or other control character (each shown as a
    visible escape, see :func:`for_terminal`), at most ``limit`` characters.

    >>> for_header("run\\r\\nBcc: evil@example.com")
    'run\\\\r\\\\nBcc: evil@example.com'
    >>> len(for_header("x" * 1000))
    200
    """
    safe = for_terminal(text)
    return safe if len(safe) <= limit else safe[: limit - 1] + _ELLIPSIS


def for_env(text: str) -> str:
    """A value for a child process's environment: a NUL (which makes starting the process
    fail) and a lone surrogate (which cannot be encoded) shown as visible escapes; all else
    kept.

    >>> for_env("x\\x00y\\nz")
    'x\\\\x00y\\nz'
    """
    return "".join(_visible(ch) if ch == "\0" or "\ud800" <= ch <= "\udfff" else ch for ch in text)


def for_slack(text: str) -> str:
    """Text for Slack mrkdwn: ``&``, ``<`` and ``>`` escaped (Slack's three control
    characters), so ``<!channel>``, ``<@U123>`` and ``<https://x|click>`` stay plain text.
    Slack has no escape for ``*``, ``_`` and ``~``: names go inside code spans where their
    look matters.

    >>> for_slack("a & b <@U123>")
    'a &amp; b &lt;@U123&gt;'
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_DISCORD_MARKDOWN = str.maketrans({c: "\\" + c for c in "\\*_~`|[]<>"})
_DISCORD_LINE_START = re.compile(r"^(\s*)([#>-])", re.MULTILINE)
_DISCORD_MENTION = re.compile(r"@(everyone|here)")


def for_discord(text: str) -> str:
    """Text for Discord markdown: its special characters, the brackets of a masked link and
    the ``<`` of a mention escaped with a backslash, a heading, quote or list mark at the
    start of a line too, and ``@everyone`` and ``@here`` broken by a zero-width space (no
    ping, even were mentions allowed).

    >>> for_discord("**bold** [click](https://evil.example) <@123>")
    '\\\\*\\\\*bold\\\\*\\\\* \\\\[click\\\\](https://evil.example) \\\\<@123\\\\>'
    >>> for_discord("# big\\n> quote") == "\\\\# big\\n\\\\> quote"
    True
    >>> for_discord("@everyone") == "@\\u200beveryone"
    True
    """
    out = text.translate(_DISCORD_MARKDOWN)
    out = _DISCORD_LINE_START.sub(lambda m: m.group(1) + "\\" + m.group(2), out)
    return _DISCORD_MENTION.sub("@\u200b\\1", out)
