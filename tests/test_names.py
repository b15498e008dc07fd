"""Hostile names from producers at every boundary they reach: stop files and commands, the
terminal, mail headers, Slack and Discord. A run id is a name, never a path, markup, a shell
word or a header; see :mod:`streamwatch.names` for the rules."""

from __future__ import annotations

import io
import json
import logging
import math
import re
from email import message_from_bytes, policy
from pathlib import Path
from typing import Any

import pytest

from streamwatch.actions.config import ActionRule
from streamwatch.actions.execute import ActionFailed, run_command, run_stop_file, stop_file_path
from streamwatch.alerting.message import Message
from streamwatch.alerting.notify.discord import check_discord, discord_payload
from streamwatch.alerting.notify.email import email_message
from streamwatch.alerting.notify.slack import check_block_kit, slack_payload
from streamwatch.alerting.testing import incident
from streamwatch.cli.kafka import TerminalFormatter
from streamwatch.incidents import Incident
from streamwatch.names import file_name, for_header, for_terminal, path_inside
from streamwatch.replay.files import format_summary, format_verbose, replay_files
from streamwatch.sinks.console import ConsoleSink

HOSTILE = [
    "../../pwned",
    "a/b",
    "x\x00y",
    "run\r\nBcc: evil@example.com",
    "\x1b[2J\x1b[31mFAKE",
    "<!channel>",
    "@everyone",
    "[click](https://evil.example)",
]


def critical(run_id: str, **fields: Any) -> Incident:
    return incident(run_id, "entropy_collapse", indicator="entropy", severity="critical", **fields)


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


# -- the rules ---------------------------------------------------------------------------


def test_file_names_are_one_safe_component_and_never_collide() -> None:
    names = [*HOSTILE, ".", "..", "", "-rf", ".hidden", "a%2Fb", "r" * 300, "r" * 301, "é"]
    out = [file_name(n) for n in names]
    assert len(set(out)) == len(names)
    for name in out:
        assert name and name not in (".", "..") and name[0] not in ".-"
        assert not set(name) & set("/\\\x00") and name.isprintable() and name.isascii()
        assert len(name) <= 120


def test_a_path_outside_the_directory_is_refused_naming_the_run(tmp_path: Path) -> None:
    (tmp_path / "stops").mkdir()
    (tmp_path / "stops" / "link").symlink_to(tmp_path)
    assert path_inside(tmp_path / "stops", "ok.stop", "r") == tmp_path / "stops" / "ok.stop"
    for bad in ("../x.stop", "link/x.stop", "/etc/x.stop", "."):
        with pytest.raises(ValueError, match=r"run 'grpo\\x1b7': the path .* is not inside"):
            path_inside(tmp_path / "stops", bad, "grpo\x1b7")


def test_no_control_character_reaches_a_terminal() -> None:
    for name in HOSTILE:
        shown = for_terminal(name)
        assert shown.isprintable()
    assert for_terminal("\x1b[2J\x1b[31mFAKE") == "\\x1b[2J\\x1b[31mFAKE"


# -- actions -----------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", HOSTILE)
def test_a_stop_file_stays_in_its_directory(run_id: str, tmp_path: Path) -> None:
    stops = tmp_path / "out" / "stops"
    rule = ActionRule(do="stop_file", path=str(stops / "{run_id}-{kind}.stop"))
    assert run_stop_file(rule, critical(run_id), 812).startswith("wrote ")
    expected = stops / f"{file_name(run_id)}-entropy_collapse.stop"
    assert files_under(tmp_path) == {tmp_path / "out", stops, expected}
    assert json.loads(expected.read_text())["run_id"] == run_id


def test_a_stop_file_template_with_the_run_as_directory(tmp_path: Path) -> None:
    rule = ActionRule(do="stop_file", path=str(tmp_path / "{run_id}" / "STOP"))
    run_stop_file(rule, critical("a/b"), 812)
    run_stop_file(rule, critical("../../pwned"), 812)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in files_under(tmp_path)) == [
        "%2E.%2F..%2Fpwned",
        "%2E.%2F..%2Fpwned/STOP",
        "a%2Fb",
        "a%2Fb/STOP",
    ]


def test_a_stop_file_template_that_climbs_out_is_refused(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    rule = ActionRule(do="stop_file", path=str(tmp_path / "in" / "{run_id}" / ".." / ".." / "x"))
    with pytest.raises(ActionFailed, match=r"run 'grpo-7': the path .* is not inside"):
        run_stop_file(rule, critical("grpo-7"), 812)
    assert files_under(tmp_path) == {tmp_path / "in"}


def test_a_relative_stop_file_template_is_taken_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    rule = ActionRule(do="stop_file", path="stops/{run_id}.stop")
    assert stop_file_path(rule, critical("a/b"), 1) == tmp_path / "stops" / "a%2Fb.stop"


@pytest.mark.parametrize("run_id", HOSTILE)
def test_a_command_runs_whatever_the_run_id(run_id: str, tmp_path: Path) -> None:
    out = tmp_path / "env"
    command = f"env > {out}"
    inc = critical(run_id, message=f"entropy collapsed in {run_id}")
    assert run_command(ActionRule(do="command", command=command), inc, 812) == "exit status 0"
    env = out.read_bytes()
    assert b"STREAMWATCH_INCIDENT_KIND=entropy_collapse\n" in env
    if "\x00" in run_id:
        assert b"STREAMWATCH_INCIDENT_RUN_ID=x\\x00y\n" in env
    else:
        assert f"STREAMWATCH_INCIDENT_RUN_ID={run_id}\n".encode() in env


def test_a_command_reads_the_run_id_as_data_not_as_shell(tmp_path: Path) -> None:
    out = tmp_path / "out"
    command = f'cd {tmp_path} && printf %s "$STREAMWATCH_INCIDENT_RUN_ID" > {out}'
    run_command(ActionRule(do="command", command=command), critical("$(touch pwned); `id`"), 1)
    assert out.read_text() == "$(touch pwned); `id`"
    assert not (tmp_path / "pwned").exists()


# -- the terminal ------------------------------------------------------------------------


def test_the_console_prints_one_line_per_update_whatever_the_names(tmp_path: Path) -> None:
    stream = io.StringIO()
    sink = ConsoleSink(stream, note=lambda inc: "muted by \x1b[8m")
    for run_id in HOSTILE:
        sink.send(critical(run_id, message=f"{run_id} broke", remedies=[f"stop {run_id}"]))
    lines = stream.getvalue().split("\n")
    assert len(lines) == 2 * len(HOSTILE) + 1 and lines[-1] == ""
    assert all(line.isprintable() for line in lines)
    assert "\\x1b[2J\\x1b[31mFAKE" in lines[8] and lines[8].startswith("CRITICAL ")
    assert lines[9] == "         try: stop \\x1b[2J\\x1b[31mFAKE"


def test_the_replay_summary_shows_hostile_run_ids_as_escapes(tmp_path: Path) -> None:
    paths = []
    for n, run_id in enumerate(HOSTILE):
        rows = [
            {"run_id": run_id, "step": s, "metrics": {"loss": math.nan, "x\x1b[2K": 1.0}}
            for s in range(30)
        ]
        paths.append(tmp_path / f"{n}.jsonl")
        paths[-1].write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    result = replay_files(paths)
    text = format_summary(result) + "\n" + format_verbose(result)
    assert all(line.isprintable() for line in text.split("\n"))
    assert "run \\x1b[2J\\x1b[31mFAKE: " in text and "run run\\r\\nBcc: evil@example.com: " in text


def test_service_log_lines_show_hostile_run_ids_as_escapes() -> None:
    formatter = TerminalFormatter("%(levelname)s %(message)s")
    for run_id in HOSTILE:
        record = logging.makeLogRecord({"msg": "action on run %s: done", "args": (run_id,)})
        assert formatter.format(record).isprintable()


# -- mail headers ------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", [*HOSTILE, "r" * 5000])
def test_a_run_id_never_adds_a_mail_header(run_id: str) -> None:
    message = Message.build("mail", "g", {"run_id": run_id}, (critical(run_id),))
    raw = email_message(message, sender="sw@example.com", to=("ml@example.com",)).as_bytes()
    assert max(len(line) for line in raw.split(b"\r\n")) <= 78
    received = message_from_bytes(raw, policy=policy.default)
    assert received["Bcc"] is None and len(received.get_all("Subject") or []) == 1
    subject = received["Subject"]
    assert subject.isprintable() and len(subject) <= 200
    assert subject == for_header(f"CRITICAL: entropy_collapse in run {run_id}")


# -- Slack and Discord -------------------------------------------------------------------


def chat_message(run_id: str) -> Message:
    inc = critical(
        run_id,
        metric=f"actor/{run_id}",
        message=f"entropy of {run_id} collapsed",
        evidence={run_id: run_id, "ratio": 0.05},
        remedies=[f"stop {run_id}"],
        because=[f"{run_id} fell"],
    )
    return Message.build("chat", "g", {"run_id": run_id}, (inc,))


def mrkdwn(payload: dict[str, Any]) -> list[str]:
    blocks = payload["blocks"]
    found = [payload["text"]]
    for block in blocks:
        for part in [block.get("text"), *block.get("fields", []), *block.get("elements", [])]:
            if isinstance(part, dict) and part.get("type") == "mrkdwn":
                found.append(part["text"])
    return found


@pytest.mark.parametrize("run_id", HOSTILE)
def test_slack_shows_a_run_id_never_a_mention_or_a_link(run_id: str) -> None:
    payload = slack_payload(chat_message(run_id))
    assert check_block_kit(payload) == []
    shown = mrkdwn(payload)
    assert len(shown) >= 4 and not [t for t in shown if "<" in t or ">" in t]
    if run_id == "<!channel>":
        assert "&lt;!channel&gt;" in payload["text"]
        assert "`actor/&lt;!channel&gt;`" in payload["blocks"][1]["text"]["text"]


def test_slack_keeps_its_own_link() -> None:
    payload = slack_payload(chat_message("<!channel>"), link="https://x.example/{run_id}")
    link = payload["blocks"][-2]["text"]["text"]
    assert link == "<https://x.example/%3C%21channel%3E|Open run &lt;!channel&gt;>"


@pytest.mark.parametrize("run_id", HOSTILE)
def test_discord_shows_a_run_id_never_a_mention_a_link_or_markdown(run_id: str) -> None:
    payload = discord_payload(chat_message(run_id))
    assert check_discord(payload) == []
    embed = payload["embeds"][0]
    ours = embed["description"].replace("**Why:**", "").replace("**Try:**", "")
    rendered = [payload["content"], ours]
    rendered += [t for f in embed["fields"] for t in (f["name"], f["value"])]
    for text in rendered:
        assert not re.search(r"(?<!\\)[\[\]<>*_~`|]", text), text
        assert "@everyone" not in text and "@here" not in text
    assert payload["allowed_mentions"] == {"parse": []}
    if run_id.startswith("[click]"):
        assert "\\[click\\](https://evil.example)" in payload["content"]
