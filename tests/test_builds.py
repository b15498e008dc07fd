"""The compiled build judges exactly as the pure one: every recorded example, every real run
of tests/data/real and every field case of tests/data/field replayed by both, in two fresh
processes, gives byte-identical incidents. Run when the installed engine is compiled (the
second pass of ``.ci/run``); the pure side is the same source read with C extensions of the
package set aside."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from streamwatch import build

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "streamwatch"

#: replay each input on its own and print its incidents, one JSON line each
REPLAY = """
import json, sys
paths = json.loads(sys.argv[1])
if sys.argv[2] == "pure":  # the package's modules from their .py source only
    import importlib.machinery as m
    package = sys.argv[3]
    def sources_only(path):
        if not path.startswith(package):
            raise ImportError(path)
        return m.FileFinder(path, (m.SourceFileLoader, m.SOURCE_SUFFIXES))
    sys.path_hooks.insert(0, sources_only)
    sys.path_importer_cache.clear()
from streamwatch import build
from streamwatch.replay.files import replay_files
print(build())
for path in paths:
    try:
        incidents = replay_files([path]).incidents
    except FileNotFoundError as exc:  # a run directory that needs its runs.toml entry to read
        print("not read:", exc)
        continue
    for incident in incidents:
        print(incident.to_json())
"""


def _inputs() -> list[str]:
    paths = sorted(ROOT.glob("examples/logs/*.jsonl"))
    paths += sorted((ROOT / "tests" / "data" / "real").glob("*.jsonl"))
    # each run of the corpus by its manifest's file (a run directory may hold its committed
    # file and the same rows recast beside it: two files of one run id, refused together)
    manifest = ROOT / "tests" / "data" / "real" / "runs.toml"
    entries = tomllib.loads(manifest.read_text(encoding="utf-8"))["run"]
    paths += sorted(manifest.parent / e["file"] for e in entries if e["file"].startswith("runs/"))
    paths += sorted((ROOT / "tests" / "data" / "field").glob("*.jsonl"))
    return [str(p) for p in paths]


def _replay(paths: list[str], which: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", REPLAY, json.dumps(paths), which, str(PACKAGE)],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=ROOT,
        check=True,
    )
    return done.stdout.splitlines()


@pytest.mark.slow
def test_the_compiled_build_gives_the_pure_builds_incidents_on_every_recorded_run() -> None:
    if build() == "pure Python":
        pytest.skip("the pure build is installed: nothing compiled to compare")
    paths = _inputs()
    assert len(paths) > 40
    compiled, pure = _replay(paths, "installed"), _replay(paths, "pure")
    assert compiled[0] == "compiled (mypyc)" and pure[0] == "pure Python"
    assert len(compiled) > 50  # the runs' incident updates (96 today): not a comparison of none
    assert compiled[1:] == pure[1:]


def test_every_class_of_the_compiled_modules_can_be_pickled_once_compiled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A native class pickles (run snapshots, checkpoints) only when marked serializable; the
    mark does nothing in the pure build, so it is checked here, in the source, on both."""
    import ast
    import runpy

    monkeypatch.chdir(ROOT)  # setup.py names the modules from the project's root
    compiled = runpy.run_path(str(ROOT / "setup.py"), run_name="setup_modules")["COMPILED"]
    plain = {"Protocol", "NamedTuple", "Enum", "StrEnum", "IntEnum", "TypedDict"}
    missing = []
    for module in compiled:
        tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {ast.unparse(b).split(".")[-1] for b in node.bases}
            marks = [ast.unparse(d) for d in node.decorator_list]
            if not bases & plain and not any("serializable=True" in m for m in marks):
                missing.append(f"{module}: {node.name}")
    assert len(compiled) >= 20
    assert missing == [], "add @mypyc_attr(serializable=True, allow_interpreted_subclasses=True)"
