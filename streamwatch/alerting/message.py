"""A notification: the incident updates of one group, for one receiver, as one message.

Its id is a hash of the receiver, the group key, the repeat number and each update's
(incident id, status, severity, step): the same message gets the same id after a restart,
which is how the sent-log keeps a restarted service from sending it twice.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from streamwatch.incidents import Incident, Status

__all__ = ["Message", "message_id"]


def message_id(receiver: str, group_key: str, incidents: tuple[Incident, ...], repeat: int) -> str:
    h = hashlib.sha256(f"{receiver}\x1f{group_key}\x1f{repeat}".encode())
    for inc in incidents:
        h.update(f"\x1e{inc.id}:{inc.status.value}:{inc.severity.value}:{inc.step}".encode())
        for entry in inc.actions:  # an update that reports an action is another message
            h.update(f"\x1d{entry.get('rule')}:{entry.get('status')}".encode())
    return h.hexdigest()[:24]


@dataclass(frozen=True, slots=True)
class Message:
    id: str
    receiver: str
    group_key: str
    labels: dict[str, str]
    incidents: tuple[Incident, ...]
    repeat: int = 0  # 0: a first notice; n: the n-th reminder of still-firing incidents
    created: float = 0.0
    part: tuple[int, int] = (1, 1)  # (this part, parts) when a group was split at group_max
    starts: dict[str, float] = field(default_factory=dict)  # incident id -> first firing time

    @classmethod
    def build(
        cls,
        receiver: str,
        group_key: str,
        labels: dict[str, str],
        incidents: tuple[Incident, ...],
        *,
        repeat: int = 0,
        created: float = 0.0,
        part: tuple[int, int] = (1, 1),
        starts: dict[str, float] | None = None,
    ) -> Message:
        mid = message_id(receiver, group_key, incidents, repeat)
        return cls(mid, receiver, group_key, labels, incidents, repeat, created, part, starts or {})

    @property
    def status(self) -> Status:
        """firing if any update in it is firing, else resolved (as Alertmanager does)."""
        firing = any(i.status is Status.FIRING for i in self.incidents)
        return Status.FIRING if firing else Status.RESOLVED

    @property
    def run_id(self) -> str:
        return self.labels.get("run_id") or self.incidents[0].run_id

    def to_record(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "receiver": self.receiver,
            "group_key": self.group_key,
            "labels": self.labels,
            "incidents": [i.model_dump(mode="json") for i in self.incidents],
            "repeat": self.repeat,
            "created": self.created,
            "part": list(self.part),
            "starts": self.starts,
        }

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> Message:
        part = rec.get("part") or [1, 1]
        return cls(
            id=str(rec["id"]),
            receiver=str(rec["receiver"]),
            group_key=str(rec["group_key"]),
            labels={str(k): str(v) for k, v in rec.get("labels", {}).items()},
            incidents=tuple(Incident.model_validate(i) for i in rec["incidents"]),
            repeat=int(rec.get("repeat", 0)),
            created=float(rec.get("created", 0.0)),
            part=(int(part[0]), int(part[1])),
            starts={str(k): float(v) for k, v in rec.get("starts", {}).items()},
        )
