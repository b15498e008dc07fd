"""``streamwatch test-route``: a sample incident through the configured routes.

Prints each route's verdict, then per receiver whether the sample would be notified or is
muted (silenced, inhibited: with the reason), then sends it to the receivers that would get
it and prints how each delivery went. A temporary state directory is used: the real spool
and sent-log are left alone.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from typing import Any, TextIO

from streamwatch.alerting.config import AlertingConfig, Route
from streamwatch.alerting.decide import decide_update
from streamwatch.alerting.delivery import Outcome
from streamwatch.alerting.dispatcher import Dispatcher
from streamwatch.alerting.route import describe_route, explain_routes, receivers_for
from streamwatch.alerting.silence import Silence, read_silences
from streamwatch.clock import SystemClock
from streamwatch.incidents import KINDS, Incident, Severity, Status, fingerprint

__all__ = ["add_arguments", "check_routes", "sample_incident"]

_INDICATOR = {
    "entropy_collapse": "entropy",
    "entropy_blowup": "entropy",
    "reward_chaos": "train_reward",
    "reward_collapse": "train_reward",
    "reward_hacking": "heldout_reward",
    "length_explosion": "response_length",
    "length_collapse": "response_length",
    "truncation_saturation": "truncation_ratio",
    "run_stalled": "run",
    "rank_straggler": "step_time",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", default="test-run", help="run id of the sample")
    p.add_argument(
        "--kind", default="entropy_collapse", choices=KINDS, metavar="KIND", help="its kind"
    )
    p.add_argument(
        "--severity",
        default="critical",
        choices=[s.value for s in Severity],
        help="its severity",
    )
    p.add_argument("--indicator", help="default: the kind's usual indicator")
    p.add_argument(
        "--firing",
        action="append",
        default=[],
        metavar="KIND[:SEVERITY[:INDICATOR]]",
        help="pretend this incident of the run is firing (to see inhibition); repeatable",
    )
    p.add_argument("--dry-run", action="store_true", help="say what would happen; send nothing")
    p.add_argument(
        "--timeout", type=float, default=15.0, metavar="SECONDS", help="time for the deliveries"
    )


def sample_incident(
    run_id: str, kind: str, severity: str, indicator: str | None, now: float
) -> Incident:
    ind = indicator or _INDICATOR.get(kind, "loss")
    return Incident(
        id=fingerprint(run_id, kind, ind),
        run_id=run_id,
        kind=kind,
        severity=Severity(severity),
        status=Status.FIRING,
        indicator=ind,
        metric=ind,
        step=int(now) % 100_000,
        ts=now,
        message=f"sample {kind} from streamwatch test-route",
        evidence={"sample": True, "value": 0.05, "reference": 1.0},
        remedies=["Nothing to do: this is a test of the alert routes."],
    )


def _pretend_firing(specs: list[str], run_id: str, now: float) -> list[Incident]:
    out = []
    for spec in specs:
        kind, _, rest = spec.partition(":")
        severity, _, indicator = rest.partition(":")
        if kind not in KINDS:
            raise ValueError(f"--firing {spec!r}: unknown kind; known: {list(KINDS)}")
        out.append(sample_incident(run_id, kind, severity or "critical", indicator or None, now))
    return out


def _active(config: AlertingConfig, now: float) -> list[Silence]:
    return [s for s in read_silences(config.silences_path()) if s.active(now)]


def check_routes(config: AlertingConfig, args: Any, *, out: TextIO) -> int:
    """0 when every receiver that should get the sample got it (or ``--dry-run``)."""
    if not config.receivers:
        print("no receivers: configure [[alerting.receivers]] or pass --webhook-url", file=out)
        return 2
    now = SystemClock().now()
    sample = sample_incident(args.run, args.kind, args.severity, args.indicator, now)
    firing = _pretend_firing(args.firing, args.run, now)
    print(
        f"sample: {sample.severity.value} {sample.kind} on {sample.indicator} in run "
        f"{sample.run_id}" + (f" (with {len(firing)} firing)" if firing else ""),
        file=out,
    )
    routes = config.effective_routes()
    for hit in explain_routes(sample, routes):
        verdict = f"-> {', '.join(hit.route.receivers)}" if hit.decision.notify else "no match:"
        reason = "" if hit.decision.notify else f" {hit.decision}"
        print(f"route {hit.index + 1} ({describe_route(hit.route)}): {verdict}{reason}", file=out)
    silences = _active(config, now)
    send_to: list[str] = []
    for _, name in receivers_for(sample, routes):
        decision = decide_update(
            sample,
            now=now,
            silences=silences,
            run_firing=firing,
            inhibit=config.inhibit,
            firing_notified=False,
            send_resolved=config.receiver(name).send_resolved,
        )
        print(f"  {name}: {'notify' if decision.notify else 'muted'}: {decision}", file=out)
        if decision.notify:
            send_to.append(name)
    if not send_to:
        print("nothing to send", file=out)
        return 0
    if args.dry_run:
        print(f"dry run: would send to {', '.join(send_to)}", file=out)
        return 0
    return _send(config, sample, send_to, args.timeout, out)


def _send(
    config: AlertingConfig, sample: Incident, names: list[str], timeout: float, out: TextIO
) -> int:
    delivery = config.delivery.model_copy(
        update={"max_attempts": min(config.delivery.max_attempts, 3), "max_retry_seconds": timeout}
    )
    with tempfile.TemporaryDirectory(prefix="streamwatch-test-route-") as state:
        trial = config.model_copy(
            update={
                "receivers": tuple(config.receiver(n) for n in names),
                "routes": (Route(receivers=tuple(names)),),
                "group_wait": 0.0,
                "delivery": delivery,
                "silences_file": f"{state}/none.json",
                "state_dir": state,
            }
        )
        dispatcher = Dispatcher(trial, state_dir=state)
        delivery_log = logging.getLogger("streamwatch.alerting.delivery")
        level = delivery_log.level
        delivery_log.setLevel(logging.ERROR)  # its spool is this temporary one: said below
        try:
            dispatcher.send(sample)
            dispatcher.close(timeout)
        finally:
            delivery_log.setLevel(level)
        outcomes = {o.receiver: o for o in dispatcher.outcomes}
    ok = True
    for name in names:
        o = outcomes.get(name)
        if o is None:
            print(f"  {name}: not sent in {timeout:g} s", file=out)
            ok = False
            continue
        ok &= o.action == "delivered"
        print(f"  {name}: {_said(o)}", file=out)
    return 0 if ok else 1


def _said(o: Outcome) -> str:
    """How a delivery went. test-route keeps nothing: a message the receiver did not take is
    not spooled for later (its state directory is a temporary one), whatever a service would
    have done with it."""
    if o.action == "delivered":
        return f"delivered after {o.attempts} attempt(s): {o.reason}"
    if o.action in ("spooled", "set_aside"):
        return f"not delivered: {o.reason}; nothing kept (test-route spools nothing)"
    return f"not delivered: {o.action} after {o.attempts} attempt(s): {o.reason}"
