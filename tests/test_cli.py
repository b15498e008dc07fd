"""The ``streamwatch`` command: exit codes, bad input, config checking, simulate and demo."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from streamwatch.cli.main import main
from streamwatch.incidents import Status
from streamwatch.replay.files import replay_files
from streamwatch.simulate import Fault, RunSpec, simulate_run, write_jsonl

HEALTHY_REAL = Path(__file__).parent / "data" / "real" / "verl-grpo-q3b_fsdp_base.jsonl"


def line(step: object, metrics: dict[str, object]) -> str:
    return json.dumps({"run_id": "r", "step": step, "metrics": metrics}) + "\n"


@pytest.fixture(scope="module")
def collapse_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("collapse") / "collapse.jsonl"
    spec = RunSpec("collapse", steps=250, seed=4, faults=(Fault("entropy_collapse", 150),))
    write_jsonl(simulate_run(spec), path)
    return path


@pytest.fixture
def warning_only_log(tmp_path: Path) -> Path:
    """A NaN in a metric outside the core set: a warning, nothing critical."""
    path = tmp_path / "warning.jsonl"
    path.write_text(
        line(1, {"my/custom": float("nan"), "actor/pg_loss": 1.0})
        + line(2, {"my/custom": 1.0, "actor/pg_loss": 1.0}),
        encoding="utf-8",
    )
    return path


@pytest.fixture
def critical_log(tmp_path: Path) -> Path:
    """A NaN loss: critical."""
    path = tmp_path / "critical.jsonl"
    path.write_text(line(1, {"loss": 1.0}) + line(2, {"loss": float("nan")}), encoding="utf-8")
    return path


def replay(path: Path, *args: str) -> int:
    return main(["replay", str(path), "--quiet", *args])


# -- --fail-on ------------------------------------------------------------------------------


def test_fail_on_warning_exits_1_on_an_entropy_collapse(
    collapse_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert replay(collapse_log, "--fail-on", "warning") == 1
    captured = capsys.readouterr()
    assert "entropy_collapse" in captured.out
    assert "failing" in captured.err


def test_fail_on_warning_exits_0_on_a_real_healthy_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert replay(HEALTHY_REAL, "--fail-on", "warning") == 0
    assert "failing" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("fail_on", "code"), [(None, 0), ("info", 1), ("warning", 1), ("critical", 0)]
)
def test_fail_on_with_only_a_warning(
    warning_only_log: Path, fail_on: str | None, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--fail-on", fail_on] if fail_on else []
    assert replay(warning_only_log, *args) == code
    out = capsys.readouterr().out
    assert "1 warning" in out and "critical" not in out


@pytest.mark.parametrize(("fail_on", "code"), [(None, 0), ("warning", 1), ("critical", 1)])
def test_fail_on_with_a_critical(
    critical_log: Path, fail_on: str | None, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--fail-on", fail_on] if fail_on else []
    assert replay(critical_log, *args) == code
    assert "1 critical" in capsys.readouterr().out


def test_fail_on_rejects_an_unknown_severity(
    critical_log: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        replay(critical_log, "--fail-on", "fatal")
    assert exc.value.code == 2
    assert "--fail-on" in capsys.readouterr().err


# -- bad input --------------------------------------------------------------------------------

BAD_LINES = [
    line(1, {"loss": 1.0, "actor/entropy": 0.5}),  # 1
    line(2, {"loss": 1.0, "actor/entropy": 0.5}),  # 2
    '{"run_id": "r", "step": 3, "metr\n',  # 3 truncated
    line("four", {"loss": 1.0}),  # 4 wrong type: step
    line(4, {"loss": "high", "actor/entropy": 0.5}),  # 5 wrong type: one metric
    json.dumps({"run_id": "r", "step": 5, "metrics": {"loss": 1.0}, "colour": "blue"})
    + "\n",  # 6 unknown field
    "\n",  # 7 empty
    line(-3, {"loss": 1.0}),  # 8 negative step
    line(5, {"loss": 1.1}),  # 9 repeated step
    '{"run_id": "r", "step": 6, "metrics": {"loss": 1e999}}\n',  # 10 overflows to inf
    line(7, {"loss": 1.0}),  # 11
    '{"run_id": "r", "step": 8, "metrics": {"lo',  # 12 truncated last line
]
#: Events that reach the engine: lines 1, 2, 5 (its good metric), 6, 9, 10 and 11.
GOOD_EVENTS = 7
#: line -> what the summary must say about it
BAD_LINE_REASONS = {
    3: "cut short",
    4: "'four'",
    5: "'high' is not a number",
    8: "-3",
    9: "repeats step 5",
    12: "cut short",
}


@pytest.fixture
def bad_log(tmp_path: Path) -> Path:
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(BAD_LINES), encoding="utf-8")
    return path


def test_bad_input_is_read_around(bad_log: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay(bad_log) == 0
    out = capsys.readouterr().out
    assert f"{GOOD_EVENTS} events" in out
    assert f"{len(BAD_LINE_REASONS)} problem(s) set aside" in out

    result = replay_files([bad_log])
    assert result.events == GOOD_EVENTS
    assert result.problem_count == len(BAD_LINE_REASONS)
    # 1e999 is a number too large for a float: data (+inf), judged as non-finite
    fired = [i for i in result.incidents if i.status is Status.FIRING]
    assert [(i.kind, i.metric, i.step) for i in fired] == [("nonfinite_metric", "loss", 6)]


@pytest.mark.parametrize("lineno", sorted(BAD_LINE_REASONS))
def test_summary_names_each_bad_line_and_why(
    bad_log: Path, lineno: int, capsys: pytest.CaptureFixture[str]
) -> None:
    replay(bad_log)
    out = capsys.readouterr().out
    at_line = re.compile(rf"{re.escape(bad_log.name)}:{lineno}\b")
    listed = [text for text in out.splitlines() if at_line.search(text)]
    assert listed, f"no problem listed at {bad_log.name}:{lineno}; summary:\n{out}"
    assert BAD_LINE_REASONS[lineno] in listed[0], listed[0]


def test_a_replay_that_read_no_event_fails_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty file checked nothing: a CI job with --fail-on must not stay green."""
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    assert replay(path, "--fail-on", "info") == 3
    captured = capsys.readouterr()
    assert "0 events" in captured.out
    assert "no file yielded an event" in captured.err
    # why, once: not again in the problems nor in the failing line
    assert (captured.out + captured.err).count("file is empty") == 1
    assert f"{path}: no event (file is empty)" in captured.out


def test_random_bytes_fail_the_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "noise.jsonl"
    path.write_bytes(bytes(range(256)) * 4)
    assert replay(path) != 0
    assert str(path) in capsys.readouterr().err
    binary = tmp_path / "model.jsonl"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe\x1b[31mred")
    assert replay(binary) == 2
    err = capsys.readouterr().err
    assert "\ufffd" not in err and "\x1b" not in err and "\x00" not in err  # nothing raw
    assert r"b'\x89PNG\r\n\x1a\n\x00\x00\xff\xfe\x1b[31mred'" in err  # escaped


def test_a_file_without_events_beside_good_ones_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text(line(1, {"loss": 1.0}), encoding="utf-8")
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert main(["replay", str(good), str(empty), "--quiet"]) == 0
    assert f"{empty}: no event (file is empty)" in capsys.readouterr().out


def test_missing_file_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "no-such-run.jsonl"
    assert replay(missing) == 2
    assert str(missing) in capsys.readouterr().err


# -- check-config -----------------------------------------------------------------------------


def test_check_config_accepts_a_valid_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ok.toml"
    path.write_text("[engine.entropy]\ncollapse_ratio = 0.08\n", encoding="utf-8")
    assert main(["check-config", str(path)]) == 0
    assert "ok" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[engine.entropy]\ncolapse_ratio = 0.08\n", "engine.entropy.colapse_ratio"),
        ('[engine.entropy]\ncollapse_ratio = "low"\n', "engine.entropy.collapse_ratio"),
        ('[engine]\nresolve_after = "often"\n', "engine.resolve_after"),
    ],
    ids=["unknown-key", "wrong-type-float", "wrong-type-int"],
)
def test_check_config_rejects_an_invalid_file_naming_the_key(
    tmp_path: Path, text: str, key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    assert main(["check-config", str(path)]) == 2
    err = capsys.readouterr().err
    assert key in err
    assert str(path) in err


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "[engine]\nresolve_afterr = 5\n",
            "engine.resolve_afterr: Extra inputs are not permitted; did you mean 'resolve_after'?",
        ),
        (
            '[[alerting.receivers]]\nname = "a"\ntype = "webhook"\nurll = "http://x"\n',
            "alerting.receivers.0.urll: Extra inputs are not permitted; did you mean 'url'?",
        ),
        ("[engin]\n", "unknown table(s) ['engin']; did you mean 'engine'?"),
    ],
    ids=["engine-key", "receiver-key", "table"],
)
def test_a_config_typo_names_the_closest_known_key(
    tmp_path: Path, text: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "typo.toml"
    path.write_text(text, encoding="utf-8")
    assert main(["check-config", str(path)]) == 2
    assert said in capsys.readouterr().err


def test_replay_uses_the_config(
    critical_log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "quiet.toml"
    config.write_text('[engine]\ndisabled_kinds = ["nonfinite_metric"]\n', encoding="utf-8")
    assert replay(critical_log, "--config", str(config), "--fail-on", "warning") == 0
    assert "no incidents" in capsys.readouterr().out


# -- simulate and demo ------------------------------------------------------------------------


def test_simulate_writes_a_run_with_the_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sim.jsonl"
    code = main(["simulate", "-o", str(out), "--steps", "260", "--fault", "entropy_collapse@150"])
    assert code == 0
    assert str(out) in capsys.readouterr().out
    result = replay_files([out])
    assert result.problem_count == 0
    collapse = [
        i for i in result.incidents if i.status is Status.FIRING and i.kind == "entropy_collapse"
    ]
    assert collapse, [(i.kind, i.step) for i in result.incidents]
    assert all(i.step >= 150 for i in collapse)


def test_simulate_rejects_an_unknown_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sim.jsonl"
    assert main(["simulate", "-o", str(out), "--fault", "entropy_melt@150"]) == 2
    assert "entropy_melt" in capsys.readouterr().err


def run_demo(capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["demo", "--steps", "200"]) == 0
    return capsys.readouterr().out


def test_demo_runs(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_demo(capsys)
    assert "incidents fired" in out
    for kind in ("nonfinite_metric", "entropy_collapse", "rank_straggler"):
        assert kind in out


def test_demo_healthy_run_raises_no_alarm(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_demo(capsys)
    healthy = re.findall(r"^  (\S+): healthy$", out, flags=re.MULTILINE)
    assert healthy, out
    alarms = [
        text
        for text in out.splitlines()
        if text.startswith(("WARNING", "CRITICAL")) and any(f" {r} " in text for r in healthy)
    ]
    assert not alarms, "\n".join(alarms)


# -- start-up, extras, offline config check ----------------------------------------------------


def test_the_listed_commands_are_the_commands() -> None:
    """``streamwatch --help`` lists COMMANDS without building their parsers: it must say what
    the full parser has."""
    import argparse

    from streamwatch.cli.args import build_parser
    from streamwatch.cli.main import COMMANDS

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {c.dest: c.help for c in sub._choices_actions}
    assert helps == COMMANDS


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["check-config", "examples/streamwatch.toml"],
        ["silence", "list", "--state-dir", "{tmp}"],
        ["test-route", "--help"],
    ],
)
def test_light_commands_import_no_engine_numpy_or_plotly(argv: list[str], tmp_path: Path) -> None:
    import subprocess
    import sys

    args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code = (
        "import sys\n"
        "from streamwatch.cli.main import main\n"
        f"try:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
        "heavy = ('river', 'scipy', 'numpy', 'plotly')\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & set(heavy))\n"
        "assert not loaded, loaded\n"
    )
    root = Path(__file__).resolve().parent.parent
    env = {"PATH": "/usr/bin:/bin", "SLACK_WEBHOOK_URL": "https://hooks.slack.com/x"}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root, env=env, timeout=60)


def test_check_config_works_offline_and_names_the_unset_variables(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    for name in ("SLACK_WEBHOOK_URL", "ONCALL_WEBHOOK_URL", "ONCALL_WEBHOOK_SECRET"):
        monkeypatch.delenv(name, raising=False)
    example = Path(__file__).resolve().parent.parent / "examples" / "streamwatch.toml"
    assert main(["check-config", str(example)]) == 0
    out = capsys.readouterr().out
    assert "ok" in out
    assert "unset environment variables" in out and "SLACK_WEBHOOK_URL" in out
    assert "SLACK_WEBHOOK_URL" not in os.environ  # the stand-ins are gone


@pytest.mark.parametrize(("command", "module", "extra"), [("report", "plotly", "report")])
def test_a_command_without_its_extra_names_the_extra(
    command: str,
    module: str,
    extra: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(root)  # run from the checkout: the hint installs the checkout's extra
    log = root / "examples" / "logs" / "healthy.jsonl"
    assert main([command, str(log), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"streamwatch: '{command}' needs {module}: pip install -e '.[{extra}]'"]


def test_run_without_the_kafka_extra_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    for name in [m for m in sys.modules if m == "kafka" or m.startswith("kafka.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "kafka", None)
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)  # from the checkout
    assert main(["run", "--bootstrap-servers", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "streamwatch: 'run' needs kafka: pip install -e '.[kafka]'"


@pytest.mark.parametrize("command", [["run"], ["record", "-o", "x.jsonl"]])
def test_kafka_commands_without_a_broker_say_so_at_once(
    command: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import socket
    import time

    pytest.importorskip("kafka")
    with socket.socket() as s:  # a local port with nothing listening on it
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.chdir(tmp_path)
    for name in [v for v in __import__("os").environ if v.startswith("STREAMWATCH_")]:
        monkeypatch.delenv(name)
    started = time.monotonic()
    assert main([*command, "--bootstrap-servers", f"127.0.0.1:{port}"]) == 1
    assert time.monotonic() - started < 20  # not the client's half minute of retries
    err = capsys.readouterr().err
    assert f"no broker at 127.0.0.1:{port}: is it running?" in err
    assert "Kafka error" not in err and "NoBrokersAvailable" not in err
