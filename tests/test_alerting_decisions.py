"""Alerting decisions without I/O: routes, silences, inhibition, grouping, repeats, retries,
config validation; and the doctests of every alerting module."""

from __future__ import annotations

import doctest
import importlib
import random
from pathlib import Path

import pytest
from pydantic import ValidationError

from streamwatch.alerting.config import (
    AlertingConfig,
    DeliveryConfig,
    InhibitConfig,
    Route,
)
from streamwatch.alerting.decide import Reason, decide_repeat, decide_update
from streamwatch.alerting.group import GroupBook, RepeatBook, split
from streamwatch.alerting.inhibit import FiringSet, inhibited_by
from streamwatch.alerting.retry import SendResult, backoff_delay, parse_retry_after, plan_retry
from streamwatch.alerting.route import explain_routes, match_route, receivers_for
from streamwatch.alerting.silence import (
    Silence,
    SilenceFile,
    add_silence,
    expire_silence,
    parse_duration,
    silenced_by,
)
from streamwatch.alerting.testing import incident
from streamwatch.clock import ManualClock
from streamwatch.config import ConfigError, load_config
from streamwatch.incidents import Incident


def replace(inc: Incident, **fields: object) -> Incident:
    """A validated copy with some fields changed."""
    return Incident.model_validate({**inc.model_dump(), **fields})


MODULES = [
    "config",
    "decide",
    "group",
    "inhibit",
    "notify.discord",
    "notify.email",
    "notify.proxy",
    "lanes",
    "redact",
    "retry",
    "route",
    "silence",
    "testing",
    "notify.text",
    "notify.webhook",
]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name: str) -> None:
    module = importlib.import_module(f"streamwatch.alerting.{name}")
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


# -- routes -------------------------------------------------------------------------------


def test_routes_match_run_glob_kind_indicator_and_minimum_severity() -> None:
    route = Route(
        receivers=("r",),
        run_id="grpo-*",
        kinds=("entropy_collapse",),
        indicator="ent*",
        min_severity="warning",
    )
    good = incident("grpo-7", "entropy_collapse", indicator="entropy")
    assert match_route(good, route).notify
    assert match_route(replace(good, severity="critical"), route).notify
    cases = {
        ("run_id_mismatch", "run_id ppo-1 does not match grpo-*"): replace(good, run_id="ppo-1"),
        ("kind_mismatch", "kind metric_spike not in ['entropy_collapse']"): replace(
            good, kind="metric_spike"
        ),
        ("indicator_mismatch", "indicator loss does not match ent*"): replace(
            good, indicator="loss"
        ),
        ("severity_below", "severity info < warning"): replace(good, severity="info"),
    }
    for (reason, detail), inc in cases.items():
        decision = match_route(inc, route)
        assert (decision.reason, decision.detail) == (Reason(reason), detail)


def test_first_matching_route_wins_unless_continue() -> None:
    routes = [
        Route(receivers=("pager",), min_severity="critical", continue_=True),
        Route(receivers=("slack", "pager"), run_id="grpo-*"),
        Route(receivers=("archive",)),
    ]
    crit = incident("grpo-1", severity="critical")
    assert receivers_for(crit, routes) == [(0, "pager"), (1, "slack")]
    warn = incident("grpo-1")
    assert receivers_for(warn, routes) == [(1, "slack"), (1, "pager")]
    other = incident("ppo-1")
    assert receivers_for(other, routes) == [(2, "archive")]
    hits = explain_routes(warn, routes)
    assert [h.decision.reason for h in hits][2] is Reason.NOT_REACHED
    assert str(hits[2].decision) == "not reached: an earlier route won"


# -- silences -----------------------------------------------------------------------------


def test_a_silence_mutes_what_it_matches_until_it_expires() -> None:
    s = Silence(id="3f2a", run_id="grpo-*", kind="entropy_collapse", starts_at=100, expires_at=160)
    hit = incident("grpo-2", "entropy_collapse", indicator="entropy")
    assert silenced_by(hit, [s], now=99.0) is None  # not started
    assert silenced_by(hit, [s], now=100.0) is s
    assert silenced_by(hit, [s], now=159.9) is s
    assert silenced_by(hit, [s], now=160.0) is None  # expired
    for miss in (
        incident("ppo-2", "entropy_collapse", indicator="entropy"),
        incident("grpo-2", "entropy_blowup", indicator="entropy"),
    ):
        assert silenced_by(miss, [s], now=120.0) is None
    by_indicator = Silence(id="a", indicator="grad_*", starts_at=0, expires_at=10)
    assert silenced_by(incident(indicator="grad_norm"), [by_indicator], now=1) is by_indicator
    assert silenced_by(incident(indicator="loss"), [by_indicator], now=1) is None


def test_silence_file_add_expire_and_reload(tmp_path: Path) -> None:
    path = tmp_path / "silences.json"
    clock = ManualClock(1000.0)
    live = SilenceFile(path, check_every=1.0)
    assert live.current(clock.now()) == []
    s = add_silence(path, now=1000.0, duration=3600, run_id="r*", comment="known", silence_id="ab")
    assert live.current(clock.now()) == []  # not re-checked within a second
    clock.advance(1.0)
    assert [x.id for x in live.current(clock.now())] == ["ab"]
    with pytest.raises(ValueError, match="exists already"):
        add_silence(path, now=1000.0, duration=10, run_id="x", silence_id="ab")
    with pytest.raises(ValueError, match="at least one matcher"):
        add_silence(path, now=1000.0, duration=10)
    ended = expire_silence(path, "a", now=1500.0)
    assert ended.expires_at == 1500.0 and not ended.active(1500.0) and s.active(1500.0)
    clock.advance(1.0)
    assert not live.current(clock.now())[0].active(1500.0)
    path.write_text("{broken", encoding="utf-8")  # a broken file keeps the last good list
    clock.advance(1.0)
    assert [x.id for x in live.current(clock.now())] == ["ab"]


def test_parse_duration() -> None:
    with pytest.raises(ValueError, match="has no unit: write 90s, 90m"):
        parse_duration("90")
    assert parse_duration("2h") == 7200
    assert parse_duration("1d2h30m15s") == 86400 + 7200 + 1800 + 15
    for bad in ("", "2x", "h", "-5", "2h 3m"):
        with pytest.raises(ValueError):
            parse_duration(bad)


# -- inhibition ---------------------------------------------------------------------------


def test_run_stalled_mutes_the_other_incidents_of_its_run_only() -> None:
    rules = InhibitConfig()
    stalled = incident("r1", "run_stalled", severity="critical", indicator="run")
    spike = incident("r1", "metric_spike")
    assert inhibited_by(spike, [stalled], rules) is not None
    assert inhibited_by(incident("r2", "metric_spike"), [stalled], rules) is None
    assert inhibited_by(stalled, [stalled], rules) is None  # never itself
    resolved_stall = replace(stalled, status="resolved")
    assert inhibited_by(spike, [resolved_stall], rules) is None
    assert inhibited_by(spike, [stalled], InhibitConfig(stalled_mutes_run=False)) is None


def test_critical_mutes_warnings_of_the_same_run_and_indicator() -> None:
    rules = InhibitConfig()
    crit = incident("r1", "entropy_collapse", severity="critical", indicator="entropy")
    warn_same = incident("r1", "entropy_blowup", indicator="entropy")
    assert inhibited_by(warn_same, [crit], rules) == (
        f"inhibited by critical entropy_collapse {crit.id} on entropy"
    )
    assert inhibited_by(incident("r1", "metric_spike", indicator="kl"), [crit], rules) is None
    other_run = incident("r2", "entropy_blowup", indicator="entropy")
    assert inhibited_by(other_run, [crit], rules) is None
    crit2 = incident("r1", "entropy_blowup", severity="critical", indicator="entropy")
    assert inhibited_by(crit2, [crit], rules) is None  # critical is not muted by critical
    off = InhibitConfig(critical_mutes_warning=False)
    assert inhibited_by(warn_same, [crit], off) is None


def test_firing_set_tracks_what_fires_and_since_when() -> None:
    firing = FiringSet()
    a = incident("r1", "metric_spike", ts=None)
    firing.observe(a, now=50.0)
    firing.observe(replace(a, severity="critical", step=300), now=80.0)
    assert firing.is_firing(a) and firing.since(a.id) == 50.0
    firing.observe(replace(a, status="resolved"), now=90.0)
    assert not firing.is_firing(a) and firing.of_run("r1") == []
    assert firing.since(a.id) == 50.0  # kept for the resolve notice's start time


# -- the notify decision ------------------------------------------------------------------


def test_decide_update_names_its_reason() -> None:
    now = 10.0
    silence = Silence(id="s1", run_id="r1", starts_at=0, expires_at=100)
    stalled = incident("r1", "run_stalled", severity="critical", indicator="run")
    firing = incident("r1")
    resolved = replace(firing, status="resolved")

    def decide(inc: object, **kw: object) -> str:
        args: dict[str, object] = {
            "now": now,
            "silences": [],
            "run_firing": [],
            "inhibit": InhibitConfig(),
            "firing_notified": False,
            "send_resolved": True,
        }
        args.update(kw)
        d = decide_update(inc, **args)  # type: ignore[arg-type]
        return f"{'notify' if d.notify else 'mute'} {d.reason.value}: {d.detail}"

    assert decide(firing) == "notify firing_new: firing: new"
    assert decide(firing, firing_notified=True) == (
        "notify severity_changed: firing: severity changed"
    )
    assert decide(firing, silences=[silence]) == "mute silenced: silenced by s1"
    assert decide(firing, silences=[silence], now=100.0) == "notify firing_new: firing: new"
    assert decide(firing, run_firing=[stalled]).startswith(
        "mute inhibited: inhibited by run_stalled"
    )
    assert decide(resolved) == (
        "mute resolved_not_notified: resolved, but its firing notice was never sent"
    )
    assert decide(resolved, firing_notified=True) == (
        "notify resolved: resolved after a firing notice"
    )
    assert decide(resolved, firing_notified=True, run_firing=[stalled]).startswith("notify")
    assert decide(resolved, firing_notified=True, send_resolved=False) == (
        "mute resolved_off: resolved notices are off for this receiver"
    )
    assert decide(resolved, firing_notified=True, silences=[silence]) == (
        "mute silenced: silenced by s1"
    )


def test_decide_repeat() -> None:
    assert decide_repeat(0.0, 3599.0, 3600.0).notify is False
    assert decide_repeat(0.0, 3600.0, 3600.0).notify is True
    off = decide_repeat(0.0, 1e9, 0.0)
    assert off.reason is Reason.REMINDERS_OFF
    assert off.detail == "reminders are off (repeat_interval = 0)"


# -- grouping and reminders ---------------------------------------------------------------


def test_groups_wait_then_go_out_per_receiver_and_run() -> None:
    book = GroupBook(("run_id",), group_wait=5.0)
    book.add("slack", 0, incident("r1", step=1), now=0.0)
    book.add("slack", 0, incident("r2", step=1), now=2.0)
    book.add("slack", 0, incident("r1", "entropy_collapse", step=2), now=3.0)
    book.add("slack", 0, incident("r1", "entropy_collapse", step=2), now=3.5)  # duplicate
    book.add("hook", 0, incident("r1", step=1), now=4.0)
    assert book.next_due() == 5.0 and book.due(4.9) == []
    first = book.due(5.0)
    assert [(b.receiver, b.labels, len(b.updates)) for b in first] == [
        ("slack", {"run_id": "r1"}, 2)
    ]
    assert first[0].group_key == 'route0:{run_id="r1"}'
    assert {b.receiver for b in book.due(9.0)} == {"slack", "hook"}
    assert len(book) == 0 and book.next_due() is None
    book.add("slack", 0, incident("r1", step=3), now=20.0)  # a new group after a flush
    assert book.due(24.0) == [] and len(book.flush_all()) == 1


def test_split_keeps_order_and_limit() -> None:
    items = [incident(step=i) for i in range(23)]
    parts = split(items, 10)
    assert [len(p) for p in parts] == [10, 10, 3]
    assert [i for p in parts for i in p] == items


def test_repeat_book_reminds_each_interval() -> None:
    book = GroupBook(("run_id",), 0.0)
    book.add("slack", 0, incident("r1"), now=0.0)
    (batch,) = book.due(0.0)
    repeats = RepeatBook()
    repeats.record_firing(batch, batch.updates[0], now=0.0)
    assert repeats.notified("slack", batch.updates[0].id)
    assert repeats.due(99.0, 100.0) == [] and repeats.next_due(100.0) == 100.0
    (reminder,) = repeats.due(100.0, 100.0)
    assert reminder.repeat == 1 and reminder.group_key == batch.group_key
    repeats.reminded("slack", batch.updates[0].id, 100.0)
    assert repeats.due(150.0, 100.0) == []
    assert repeats.due(200.0, 100.0)[0].repeat == 2
    repeats.drop("slack", batch.updates[0].id)
    assert repeats.due(1e6, 100.0) == [] and repeats.due(1e6, 0.0) == []


# -- retries ------------------------------------------------------------------------------


def test_status_codes_are_classified() -> None:
    assert SendResult.http(200).ok and SendResult.http(204).ok
    for code in (429, 500, 502, 503, 504):
        r = SendResult.http(code)
        assert not r.ok and r.retryable, code
    for code in (301, 400, 401, 403, 404, 410, 413):
        r = SendResult.http(code)
        assert not r.ok and not r.retryable, code


def test_backoff_grows_caps_and_jitters_with_a_seeded_rng() -> None:
    policy = DeliveryConfig(backoff_initial=1.0, backoff_multiplier=2.0, backoff_max=5.0)
    assert [backoff_delay(n, policy, 0.0) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    rng_a, rng_b = random.Random(7), random.Random(7)
    a = [backoff_delay(3, policy, rng_a.random()) for _ in range(20)]
    b = [backoff_delay(3, policy, rng_b.random()) for _ in range(20)]
    assert a == b and len(set(a)) == 20 and all(3.2 <= d <= 4.0 for d in a)


def test_plan_retry_honours_retry_after_and_gives_up_when_exhausted() -> None:
    policy = DeliveryConfig(
        backoff_initial=0.5, jitter=0.0, max_attempts=3, max_retry_seconds=30, max_retry_after=60
    )
    limited = SendResult.http(429, retry_after=10.0)
    assert plan_retry(limited, attempt=1, elapsed=0, policy=policy, u=0).delay == 10.0
    huge = SendResult.http(503, retry_after=3600.0)
    plan = plan_retry(huge, attempt=1, elapsed=0, policy=policy, u=0)
    assert plan.action == "exhausted" and plan.delay == 60.0  # capped, and beyond the budget
    timeout = SendResult.error("timed out after 1 s")
    assert plan_retry(timeout, attempt=2, elapsed=1, policy=policy, u=0).action == "retry"
    assert plan_retry(timeout, attempt=3, elapsed=1, policy=policy, u=0).action == "exhausted"
    assert plan_retry(timeout, attempt=1, elapsed=29.9, policy=policy, u=0).action == "exhausted"
    final = plan_retry(SendResult.http(404, "no_service"), attempt=1, elapsed=0, policy=policy, u=0)
    assert (final.action, final.reason) == ("fail", "final: HTTP 404 (no_service)")


def test_retry_after_in_seconds_or_http_date() -> None:
    assert parse_retry_after("2", now=0.0) == 2.0
    assert parse_retry_after(" 1.5 ", now=0.0) == 1.5
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412480.0) == 0.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now=1445412480.0) == 30.0
    for bad in (None, "", "soon", "-"):
        assert parse_retry_after(bad, now=0.0) is None


# -- config -------------------------------------------------------------------------------


def test_config_validation_names_the_problem(tmp_path: Path) -> None:
    hook = {"name": "ops", "type": "webhook", "url": "https://example.com/h"}
    with pytest.raises(ValidationError, match="unknown receiver"):
        AlertingConfig.model_validate({"receivers": [hook], "routes": [{"receivers": ["x"]}]})
    with pytest.raises(ValidationError, match="duplicate"):
        AlertingConfig.model_validate({"receivers": [hook, hook]})
    with pytest.raises(ValidationError, match="group_by must include run_id"):
        AlertingConfig.model_validate({"group_by": ["kind"]})
    with pytest.raises(ValidationError, match="unknown field"):
        AlertingConfig.model_validate({"templates": {"link": "https://x/{run}"}})
    with pytest.raises(ValidationError, match=r"templates\.link"):
        AlertingConfig.model_validate({"templates": {"link": "https://x/{step:05d}"}})
    with pytest.raises(ValidationError, match="secret and format are for webhooks"):
        AlertingConfig.model_validate({"receivers": [{**hook, "type": "slack", "secret": "s"}]})
    path = tmp_path / "c.toml"
    path.write_text(
        '[alerting]\ngroup_max = 0\n[[alerting.receivers]]\nname = "a"\ntype = "webhook"\n'
        'url = "ftp://example.com/tok3n-abcdef"\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    text = str(info.value)
    assert "alerting.group_max" in text and "http:// or https://" in text
    assert "tok3n" not in text


def test_default_route_and_state_paths() -> None:
    cfg = AlertingConfig.model_validate(
        {"receivers": [{"name": "a", "type": "slack", "url": "https://hooks.slack.com/x"}]}
    )
    (route,) = cfg.effective_routes()
    assert route.receivers == ("a",) and route.min_severity.value == "warning"
    assert cfg.silences_path() == Path(".streamwatch/alerts/silences.json")
    assert AlertingConfig().effective_routes() == ()
    assert load_config(None).alerting == AlertingConfig()


def test_the_config_module_imports_only_the_incident_model() -> None:
    import subprocess
    import sys

    code = (
        "import sys, streamwatch.alerting.config\n"
        "print(sorted(m for m in sys.modules if m.startswith('streamwatch')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == (
        "['streamwatch', 'streamwatch._moved', 'streamwatch.alerting', "
        "'streamwatch.alerting.config', 'streamwatch.incidents']"
    )
