"""The distribution's name and the hints that install an extra: ``streamwatch-rl`` from PyPI
(``streamwatch`` there is another project), or the checkout itself when run from one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from streamwatch._install import DISTRIBUTION, hint_for, source_checkout

ROOT = Path(__file__).resolve().parent.parent
TENSORBOARD_RUN = ROOT / "tests" / "data" / "formats" / "tensorboard"
# Runs the command as if the tensorboard package were not installed.
WITHOUT_TENSORBOARD = (
    "import sys; sys.modules['tensorboard'] = None; "
    "from streamwatch.cli.main import main; sys.exit(main(sys.argv[1:]))"
)


def _replay_without_tensorboard(cwd: Path, pythonpath: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_TENSORBOARD, "replay", str(TENSORBOARD_RUN)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    return done.stderr


def test_the_project_is_named_as_the_hints_name_it() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["name"] == DISTRIBUTION == "streamwatch-rl"
    assert project["scripts"] == {"streamwatch": "streamwatch.cli:main"}  # the command stays


def test_a_checkout_is_recognised() -> None:
    assert source_checkout() == ROOT


def test_in_a_checkout_the_hint_installs_the_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    assert hint_for("report", ROOT) == "pip install -e '.[report]'"
    monkeypatch.chdir(tmp_path)
    assert hint_for("report", ROOT) == f"pip install -e '{ROOT}[report]'"
    assert hint_for("report", None) == "pip install 'streamwatch-rl[report]'"


def test_a_replay_from_the_checkout_names_the_checkouts_install() -> None:
    err = _replay_without_tensorboard(cwd=ROOT)
    assert "pip install -e '.[tensorboard]'" in err, err
    assert str(TENSORBOARD_RUN) in err


def test_a_replay_from_an_installed_package_names_the_distribution(tmp_path: Path) -> None:
    """The package on its own, as a wheel puts it in site-packages: no pyproject beside it."""
    site = tmp_path / "site"
    shutil.copytree(
        ROOT / "streamwatch", site / "streamwatch", ignore=shutil.ignore_patterns("__pycache__")
    )
    for runtime in ROOT.glob("*__mypyc*"):  # the compiled build's shared library, beside it
        shutil.copy(runtime, site)
    err = _replay_without_tensorboard(cwd=tmp_path, pythonpath=site)
    assert "pip install 'streamwatch-rl[tensorboard]'" in err, err


def test_every_hint_in_the_code_comes_from_the_one_function() -> None:
    """No module but streamwatch/_install.py spells an install command or a bare extra."""
    spelled = re.compile(r"pip install|streamwatch\[")
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted((ROOT / "streamwatch").rglob("*.py"))
        if path.name != "_install.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if spelled.search(line)
    ]
    assert found == []


def test_the_readme_installs_the_distribution() -> None:
    """Every pip install in the README and the docs names streamwatch-rl or the checkout
    (no release is published: ``pip install '.[report]'``), never the other project's name."""
    readme = "\n".join(
        p.read_text(encoding="utf-8") for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    )
    installs = re.findall(r"pip install [^`\n|]*", readme)
    checkout = r"(^|\s)'?\.(\[[a-z,]+\])?'?(\s|$)"
    assert sum(DISTRIBUTION in line or bool(re.search(checkout, line)) for line in installs) >= 3
    for line in installs:
        words = line.partition("#")[0].split()[2:]  # a shell comment is not installed
        names = [w.strip("'\"") for w in words if not w.startswith("-")]
        ours = [w for w in names if w.split("[")[0] in ("streamwatch", DISTRIBUTION, ".")]
        assert all(w.split("[")[0] != "streamwatch" for w in ours), line
    assert not re.search(r"`streamwatch\[", readme)


@pytest.mark.slow
def test_the_wheel_installs_streamwatch_alone_and_its_commands_work(tmp_path: Path) -> None:
    """``producers/`` stays in the checkout: the wheel holds one top-level package, and the
    command (``simulate`` among them) works from it without ``producers``."""
    import zipfile

    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    built = subprocess.run(
        [*pip, "-w", str(tmp_path / "dist"), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"streamwatch"}
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(site)}
    run = subprocess.run(
        [sys.executable, "-c", "import producers"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode != 0 and "No module named 'producers'" in run.stderr
    out = tmp_path / "sim.jsonl"
    sim = [sys.executable, "-m", "streamwatch", "simulate", "--runs", "1", "--steps", "20"]
    run = subprocess.run(
        [*sim, "-o", str(out)], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    assert len(out.read_text(encoding="utf-8").splitlines()) >= 20


def test_a_producer_runs_from_the_checkout() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "producers.training_loop", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0 and "--bootstrap-servers" in run.stdout, run.stderr


def test_an_old_import_path_warns_and_gives_the_moved_module() -> None:
    import importlib

    from streamwatch.client import publish

    sys.modules.pop("streamwatch.publish", None)
    with pytest.warns(DeprecationWarning, match=r"streamwatch\.publish moved to"):
        old = importlib.import_module("streamwatch.publish")
    assert old is publish
    sys.modules.pop("streamwatch.publish", None)
