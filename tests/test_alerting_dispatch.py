"""The dispatcher's decisions end to end, on a manual clock, delivering to a real HTTP
receiver: silences and inhibition mute exactly what they match, silences expire, resolve
notices follow firing ones, reminders come every repeat_interval."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamwatch.alerting.config import AlertingConfig
from streamwatch.alerting.decide import Reason
from streamwatch.alerting.dispatcher import Dispatcher
from streamwatch.alerting.silence import add_silence
from streamwatch.alerting.testing import RecordingReceiver, incident
from streamwatch.clock import ManualClock
from streamwatch.incidents import Incident

GROUP_WAIT = 10.0


def resolved(inc: Incident, step: int = 500) -> Incident:
    return Incident.model_validate({**inc.model_dump(), "status": "resolved", "step": step})


class Harness:
    """A dispatcher on a manual clock (no scheduler thread) and a receiver."""

    def __init__(self, rx: RecordingReceiver, state: Path, **over: Any) -> None:
        data: dict[str, Any] = {
            "receivers": [
                {"name": "hook", "type": "webhook", "url": rx.url},
                {
                    "name": "quiet",
                    "type": "webhook",
                    "url": rx.url + "/quiet",
                    "send_resolved": False,
                },
            ],
            "routes": [{"receivers": ["hook", "quiet"]}],
            "group_wait": GROUP_WAIT,
            "repeat_interval": 0,
        }
        data.update(over)
        self.rx = rx
        self.clock = ManualClock()
        self.config = AlertingConfig.model_validate(data)
        self.d = Dispatcher(self.config, state_dir=state, clock=self.clock, background=False)
        self.silences = state / "silences.json"
        self._seen = 0

    def step(self, *incs: Incident, wait: float = GROUP_WAIT) -> list[tuple[str, str, str]]:
        """Send, let group_wait pass, and return what the receivers newly accepted as
        (receiver, incident kind@run, status)."""
        for inc in incs:
            self.d.send(inc)
        self.d.poll()
        self.clock.advance(wait)
        self.d.poll()
        expected = self.d.stats.messages
        assert self.rx.wait_for(lambda r: len(r.accepted()) >= expected, timeout=5.0)
        got = self.rx.accepted()[self._seen :]
        self._seen = len(self.rx.accepted())
        out = []
        for r in got:
            name = "quiet" if r.path.endswith("/quiet") else "hook"
            out += [
                (name, f"{i['kind']}@{i['run_id']}", i["status"]) for i in r.json()["incidents"]
            ]
        return sorted(out)

    def reasons(self, receiver: str = "hook") -> dict[str, str]:
        return {
            f"{r.incident.kind}@{r.incident.run_id}:{r.incident.status.value}": str(r.decision)
            for r in self.d.decisions
            if r.receiver == receiver
        }


@pytest.fixture
def rx() -> Iterator[RecordingReceiver]:
    with RecordingReceiver() as receiver:
        yield receiver


def test_a_silence_mutes_exactly_what_it_matches_and_expires(
    rx: RecordingReceiver, tmp_path: Path
) -> None:
    h = Harness(rx, tmp_path)
    s = add_silence(
        h.silences,
        now=h.clock.now(),
        duration=60,
        run_id="grpo-*",
        kind="entropy_collapse",
        silence_id="3f2a",
    )
    collapse_1 = incident("grpo-1", "entropy_collapse", indicator="entropy")
    got = h.step(
        collapse_1,
        incident("grpo-1", "metric_spike"),  # other kind, same run
        incident("ppo-1", "entropy_collapse", indicator="entropy"),  # other run
    )
    hook = [g for g in got if g[0] == "hook"]
    assert hook == [
        ("hook", "entropy_collapse@ppo-1", "firing"),
        ("hook", "metric_spike@grpo-1", "firing"),
    ]
    assert h.reasons()["entropy_collapse@grpo-1:firing"] == f"silenced by {s.id}"
    # its resolve is muted too, and so is a new update while the silence lasts
    assert h.step(resolved(collapse_1)) == []
    h.clock.advance(60.0)  # the silence has expired
    collapse_2 = incident("grpo-2", "entropy_collapse", indicator="entropy", step=900)
    assert h.step(collapse_2) == [
        ("hook", "entropy_collapse@grpo-2", "firing"),
        ("quiet", "entropy_collapse@grpo-2", "firing"),
    ]


def test_a_silence_added_while_running_is_picked_up(rx: RecordingReceiver, tmp_path: Path) -> None:
    h = Harness(rx, tmp_path)
    assert len(h.step(incident("r1", "metric_spike"))) == 2
    add_silence(h.silences, now=h.clock.now(), duration=3600, run_id="r1", silence_id="later")
    assert h.step(incident("r1", "entropy_collapse", indicator="entropy")) == []
    assert h.reasons()["entropy_collapse@r1:firing"] == "silenced by later"
    assert h.d.stats.muted[Reason.SILENCED] == 2  # one update, two receivers, by its reason


def test_a_stalled_run_mutes_its_other_incidents_only(
    rx: RecordingReceiver, tmp_path: Path
) -> None:
    h = Harness(rx, tmp_path)
    stalled = incident("r1", "run_stalled", severity="critical", indicator="run")
    spike_r1 = incident("r1", "metric_spike")
    got = h.step(spike_r1, incident("r2", "metric_spike"), stalled)
    assert [g for g in got if g[0] == "hook"] == [
        ("hook", "metric_spike@r2", "firing"),
        ("hook", "run_stalled@r1", "firing"),
    ]
    assert h.reasons()["metric_spike@r1:firing"].startswith("inhibited by run_stalled")
    # the run comes back: the stall resolves, and the run's incidents are heard again
    later = incident("r1", "entropy_collapse", indicator="entropy", step=700)
    got = h.step(resolved(stalled), later)
    assert ("hook", "run_stalled@r1", "resolved") in got
    assert ("hook", "entropy_collapse@r1", "firing") in got
    assert ("quiet", "run_stalled@r1", "resolved") not in got  # send_resolved = false


def test_a_critical_mutes_warnings_of_its_run_and_indicator(
    rx: RecordingReceiver, tmp_path: Path
) -> None:
    h = Harness(rx, tmp_path)
    crit = incident("r1", "entropy_collapse", severity="critical", indicator="entropy")
    warn_same = incident("r1", "entropy_blowup", indicator="entropy")
    warn_other_indicator = incident("r1", "metric_spike", indicator="kl")
    warn_other_run = incident("r2", "entropy_blowup", indicator="entropy")
    got = h.step(warn_same, warn_other_indicator, warn_other_run, crit)
    assert [g[1] for g in got if g[0] == "hook"] == [
        "entropy_blowup@r2",
        "entropy_collapse@r1",
        "metric_spike@r1",
    ]
    assert h.reasons()["entropy_blowup@r1:firing"].startswith("inhibited by critical")
    # the muted warning's resolve is not sent: its firing notice never was
    assert h.step(resolved(warn_same)) == []
    assert h.reasons()["entropy_blowup@r1:resolved"] == (
        "resolved, but its firing notice was never sent"
    )


def test_resolve_notices_follow_firing_ones(rx: RecordingReceiver, tmp_path: Path) -> None:
    h = Harness(rx, tmp_path)
    spike = incident("r1", "metric_spike")
    assert h.step(spike) == [
        ("hook", "metric_spike@r1", "firing"),
        ("quiet", "metric_spike@r1", "firing"),
    ]
    assert h.step(resolved(spike)) == [("hook", "metric_spike@r1", "resolved")]
    assert h.reasons("quiet")["metric_spike@r1:resolved"] == (
        "resolved notices are off for this receiver"
    )
    # fired and resolved within one group_wait: one message, firing then resolved
    flap = incident("r2", "metric_spike")
    got = h.step(flap, resolved(flap))
    assert [g for g in got if g[0] == "hook"] == [
        ("hook", "metric_spike@r2", "firing"),
        ("hook", "metric_spike@r2", "resolved"),
    ]
    body = rx.accepted()[-2].json()
    body = body if body["receiver"] == "hook" else rx.accepted()[-1].json()
    assert [i["status"] for i in body["incidents"]] == ["firing", "resolved"]


def test_a_finished_run_is_not_reminded_of_and_a_run_that_goes_on_is(
    rx: RecordingReceiver, tmp_path: Path
) -> None:
    h = Harness(rx, tmp_path, repeat_interval=3600, routes=[{"receivers": ["hook"]}])
    ended, live = incident("r1", "entropy_collapse"), incident("r2", "entropy_collapse")
    # the end arrives before the first notice went out (group_wait): the notice still goes
    h.d.send(ended)
    h.d.run_ended("r1")
    assert h.step(live) == [
        ("hook", "entropy_collapse@r1", "firing"),
        ("hook", "entropy_collapse@r2", "firing"),
    ]
    assert h.step(wait=3600) == [("hook", "entropy_collapse@r2", "firing")]
    assert h.step(wait=3600) == [("hook", "entropy_collapse@r2", "firing")]
    # a firing update after its end: the run went on (another rank, a restart)
    spike = incident("r1", "metric_spike")
    assert h.step(spike) == [("hook", "metric_spike@r1", "firing")]
    assert ("hook", "metric_spike@r1", "firing") in h.step(wait=3600)


def test_reminders_every_repeat_interval_while_firing(
    rx: RecordingReceiver, tmp_path: Path
) -> None:
    h = Harness(rx, tmp_path, repeat_interval=3600, routes=[{"receivers": ["hook"]}])
    spike = incident("r1", "metric_spike")
    assert h.step(spike) == [("hook", "metric_spike@r1", "firing")]
    assert h.step(wait=3600 - 1) == []  # the first notice went out at group_wait
    assert h.step(wait=1) == [("hook", "metric_spike@r1", "firing")]
    assert rx.accepted()[-1].json()["repeat"] == 1
    assert h.step(wait=3600) == [("hook", "metric_spike@r1", "firing")]
    assert rx.accepted()[-1].json()["repeat"] == 2
    assert h.step(resolved(spike)) == [("hook", "metric_spike@r1", "resolved")]
    assert h.step(wait=10 * 3600) == []
