"""Per-run lanes of one receiver: order per run, retries that hold up only their own run,
set aside versus receiver down (pure state, no I/O)."""

from __future__ import annotations

from streamwatch.alerting.lanes import DOWN_AFTER, Entry, Lanes
from streamwatch.alerting.message import Message
from streamwatch.alerting.testing import incident


def msg(run: str, step: int = 1) -> Message:
    inc = incident(run, step=step)
    return Message.build("hook", f"{run}:{step}", {"run_id": run}, (inc,))


def take(lanes: Lanes, now: float) -> Entry:
    entry, wake = lanes.pick(now)
    assert entry is not None, f"nothing to try at {now} (next at {wake})"
    lanes.tried(entry, now)
    return entry


def test_a_run_keeps_its_order_while_other_runs_pass_its_retries() -> None:
    lanes = Lanes()
    for m in (msg("a", 1), msg("a", 2), msg("b", 1)):
        lanes.add(m)
    a1 = take(lanes, 0.0)
    lanes.failed(a1, 0.0, delay=10.0)
    b1 = take(lanes, 1.0)  # a2 waits behind a1; b1 goes
    assert b1.message.run_id == "b"
    lanes.delivered(b1, 1.0)
    assert lanes.pick(2.0) == (None, 10.0)  # only a1's retry is left, at 10 s
    a1_again = take(lanes, 10.0)
    assert a1_again is a1
    lanes.delivered(a1, 10.0)
    assert take(lanes, 10.0).message.group_key == "a:2"


def test_retry_after_holds_every_message_of_the_receiver() -> None:
    lanes = Lanes()
    lanes.add(msg("a"))
    lanes.add(msg("b"))
    a = take(lanes, 0.0)
    lanes.failed(a, 0.0, delay=0.1, hold=5.0)
    assert lanes.pick(1.0) == (None, 5.0)
    assert take(lanes, 5.0).message.run_id in {"a", "b"}


def test_a_lone_run_with_a_bad_head_probes_its_next_message() -> None:
    lanes = Lanes()
    lanes.add(msg("a", 1))
    lanes.add(msg("a", 2))
    a1 = take(lanes, 0.0)
    lanes.failed(a1, 0.0, delay=1.0)
    take(lanes, 1.0)
    assert lanes.exhausted(a1, 1.0, rest=60.0) == "suspect"  # nothing delivered since
    a2 = take(lanes, 1.0)
    assert a2.message.group_key == "a:2"
    assert lanes.delivered(a2, 1.5) == [a1]  # the receiver works: a1 is set aside
    assert len(lanes) == 0


def test_nothing_delivered_and_nothing_left_to_try_means_down() -> None:
    lanes = Lanes()
    lanes.add(msg("a"))
    a = take(lanes, 0.0)
    lanes.failed(a, 0.0, delay=1.0)
    take(lanes, 1.0)
    assert lanes.exhausted(a, 1.0, rest=60.0) == "down"
    assert lanes.down and lanes.pick(2.0) == (None, 61.0)
    lanes.add(msg("b"))  # a new message: one try at once
    probe = take(lanes, 2.0)
    assert probe.message.run_id == "b"
    assert lanes.delivered(probe, 2.5) == []  # an outage ended: a is not set aside...
    assert not lanes.down
    again = take(lanes, 2.5)  # ...but tried afresh
    assert again is a and again.attempts == 1


def test_suspects_pile_up_without_a_delivery_and_the_receiver_rests() -> None:
    lanes = Lanes()
    runs = [f"r{n}" for n in range(DOWN_AFTER + 2)]
    for run in runs:
        lanes.add(msg(run))
    entries = []
    for _ in runs:
        entries.append(e := take(lanes, 0.0))
        lanes.failed(e, 0.0, delay=1.0)
    assert [e.message.run_id for e in entries] == runs
    verdicts = [lanes.exhausted(e, 2.0, rest=30.0) for e in entries[:DOWN_AFTER]]
    assert verdicts == ["suspect"] * (DOWN_AFTER - 1) + ["down"]
    assert len(lanes) == len(runs)  # nothing set aside: all of it is kept
    probe = take(lanes, 32.0)  # after the rest: one message, of the oldest clean run
    assert probe is entries[DOWN_AFTER]
    lanes.failed(probe, 32.0, delay=1.0, rest=30.0)
    assert lanes.pick(33.0) == (None, 62.0)  # the probe failed: rest again


def test_after_a_delivery_a_message_that_uses_its_retries_is_set_aside() -> None:
    lanes = Lanes()
    lanes.add(msg("bad"))
    lanes.add(msg("good"))
    bad = take(lanes, 0.0)
    lanes.failed(bad, 0.0, delay=1.0)
    lanes.delivered(take(lanes, 0.5), 0.5)
    take(lanes, 1.0)
    assert lanes.exhausted(bad, 1.0, rest=60.0) == "set_aside"
    assert "bad" not in {e.message.run_id for e in lanes.entries()}


def test_a_failure_that_is_not_the_messages_fault_rests_the_receiver() -> None:
    lanes = Lanes()
    lanes.add(msg("a"))
    lanes.add(msg("b"))
    a = take(lanes, 0.0)
    lanes.failed(a, 0.0, delay=1.0)
    lanes.delivered(take(lanes, 0.5), 0.5)  # b went out after a first failed
    take(lanes, 1.0)
    # a 429 or a timeout says nothing about a's payload: not set aside, the receiver rests
    assert lanes.exhausted(a, 1.0, rest=30.0, blame=False) == "down"
    assert len(lanes) == 1 and lanes.pick(2.0) == (None, 31.0)
