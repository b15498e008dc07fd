"""The incidents the engine gives on fixed inputs, as lines of JSON: what
tests/test_engine_outputs.py compares with the outputs saved in tests/data/expected.

    python tests/engine_outputs.py tests/data/expected   # rewrite the saved outputs

The inputs: every recorded example (examples/logs), the real runs (tests/data/real), and
simulated runs of every fault kind and healthy ones (seeded, built here).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

from streamwatch.incidents import Incident
from streamwatch.replay.files import replay_files
from streamwatch.simulate import FAULT_KINDS, healthy_spec, random_fault_spec
from streamwatch.simulate.scoring import replay_spec

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples" / "logs").glob("*.jsonl"))
REAL = sorted((ROOT / "tests" / "data" / "real").glob("*.jsonl"))
SEEDS = (0, 1, 2)


def lines(incidents: list[Incident]) -> list[str]:
    """Incident updates as sorted-key JSON lines."""
    out = []
    for inc in incidents:
        d = inc.model_dump(mode="json")
        out.append(json.dumps(d, sort_keys=True))
    return out


def cases() -> Iterator[tuple[str, list[str]]]:
    for path in [*EXAMPLES, *REAL]:
        yield f"{path.parent.name}/{path.stem}", lines(replay_files([path]).incidents)
    for kind in FAULT_KINDS:
        for seed in SEEDS:
            yield f"simulated/{kind}-{seed}", lines(replay_spec(random_fault_spec(kind, seed)))
    for seed in SEEDS:
        yield f"simulated/healthy-{seed}", lines(replay_spec(healthy_spec(f"h{seed}", seed)))


def main() -> None:
    out = Path(sys.argv[1])
    for name, found in cases():
        path = out / (name.replace("/", "__") + ".jsonl")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(line + "\n" for line in found))
        print(f"{name}: {len(found)} updates")


if __name__ == "__main__":
    main()
