"""The service's settings: everything it needs besides the engine config."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from streamwatch.incidents import Severity
from streamwatch.live.kafka_tools import TopicSpec
from streamwatch.sources.kafka import DEFAULT_MAX_MESSAGE_BYTES, KafkaConnection

__all__ = ["ServiceSettings"]


class ServiceSettings(BaseModel):
    """Everything the service needs besides the engine config; validated at start-up."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    connection: KafkaConnection
    topic: str = Field("streamwatch.metrics", min_length=1)
    group: str = Field("streamwatch", min_length=1)
    incidents_topic: str = Field("streamwatch.incidents", description="'' for none")
    dead_letter_topic: str = Field("streamwatch.deadletter", description="'' for none")
    state_topic: str = Field("streamwatch.state", description="'' turns checkpoints off")
    control_topic: str = Field(
        "streamwatch.control", description="stop requests and action records ('' for none)"
    )
    partitions: int = Field(4, ge=1, description="for topics the service creates")
    replication_factor: int = Field(-1, description="for topics it creates; -1: broker default")
    incidents_out: Path | None = None
    report_out: Path | None = None  # the HTML report of the watched runs, rewritten...
    report_seconds: float = Field(30.0, gt=0)  # ...this often
    # the report's intervention ledger, chosen as `streamwatch ledger` chooses: a selector is
    # tag:KEY=VALUE or a glob on the run id; a candidate ([NAME=]SELECTOR, its intervention)
    ledger_baseline: tuple[str, ...] = ()
    ledger_candidates: tuple[tuple[str, str], ...] = ()
    ledger_correction: Literal["holm", "bh"] = "holm"
    ledger_max_runs: int = Field(64, ge=2, description="runs the ledger judges at most")
    tick_seconds: float = Field(1.0, gt=0)
    status_seconds: float = Field(60.0, gt=0, description="between status lines (rate, lag)")
    commit_interval: float = Field(
        5.0, ge=0, description="seconds between offset commits and checkpoints (0: every batch)"
    )
    max_message_bytes: int = Field(DEFAULT_MAX_MESSAGE_BYTES, ge=64)
    session_timeout_ms: int = Field(10_000, ge=1000)
    fetch_max_wait_ms: int = Field(50, ge=0, description="bounds latency at low load")
    max_poll_records: int = Field(
        5000,
        ge=1,
        description="records a poll returns at most: a poll that empties the client's buffer "
        "sends the next fetches before the batch is judged",
    )
    console: bool = True
    console_severity: Severity = Severity.WARNING
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="serve /metrics and /healthz here (0: any free port)"
    )
    metrics_host: str = Field("127.0.0.1", description="the address /metrics listens on")

    @model_validator(mode="after")
    def _ledger_needs_both_arms_and_a_report(self) -> ServiceSettings:
        if not self.ledger_baseline and not self.ledger_candidates:
            return self
        if not self.ledger_baseline or not self.ledger_candidates:
            raise ValueError("the ledger needs a baseline selector and at least one candidate")
        if self.report_out is None:
            raise ValueError("the ledger is a section of the report: give report_out")
        return self

    def topic_specs(self) -> dict[str, TopicSpec]:
        """The topics the service uses, as it creates those that are missing."""
        specs = {self.topic: TopicSpec(self.partitions, self.replication_factor)}
        for extra in (self.incidents_topic, self.dead_letter_topic):
            if extra:
                specs[extra] = TopicSpec(self.partitions, self.replication_factor)
        if self.state_topic:
            specs[self.state_topic] = TopicSpec.state(self.partitions, self.replication_factor)
        if self.control_topic:  # compacted: a run's last message holds all its records
            specs[self.control_topic] = TopicSpec.state(self.partitions, self.replication_factor)
        return specs
