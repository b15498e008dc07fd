"""``publish --follow`` into the real broker, then ``run``: the incidents of a replay of the
finished file. Needs the development broker (STREAMWATCH_BOOTSTRAP)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_service import (
    NO_STALLS,
    Names,
    assert_same_incidents,
    jsonl_lines,
    replayed,
    settings,
    simulated_file,
)

from streamwatch.cli.kafka import main as kafka_main
from streamwatch.live import Service
from streamwatch.live.testing import delete_topics
from streamwatch.sources import FileSource

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.filterwarnings("ignore:(read|open)_text is deprecated:DeprecationWarning"),
]


@pytest.fixture
def names(bootstrap: str) -> Any:
    created = Names.fresh()
    yield created
    delete_topics(bootstrap, created.all())


def test_a_followed_file_published_then_run_equals_its_replay(
    bootstrap: str, names: Names, tmp_path: Path
) -> None:
    """A writer thread appends a simulated two-run log 40 lines at a time while `publish
    --follow` sends what it reads; the service then gives exactly the replay's incidents."""
    finished, _ = simulated_file(tmp_path / "finished.jsonl", names.group)
    expected = replayed(finished)
    lines = finished.read_bytes().splitlines(keepends=True)
    growing = tmp_path / "growing.jsonl"
    growing.write_bytes(b"")

    def write() -> None:
        for start in range(0, len(lines), 40):
            with growing.open("ab") as fh:
                fh.write(b"".join(lines[start : start + 40]))
            time.sleep(0.05)

    writer = threading.Thread(target=write)
    writer.start()
    command = ["publish", "--follow", "--poll", "0.1", "--idle-exit", "1.5", str(growing)]
    assert kafka_main([*command, "--bootstrap-servers", bootstrap, "--topic", names.topic]) == 0
    writer.join()
    out = tmp_path / "incidents.jsonl"
    counts = Service(settings(bootstrap, names, incidents_out=out), NO_STALLS).run(max_idle=3.0)
    assert counts.events == sum(1 for _ in FileSource(finished))
    assert counts.dead_letters == 0
    assert_same_incidents(jsonl_lines(out), expected)
