"""A Kafka broker of one test: docker/kafka.sh with its own state directory and ports, so
that the test can stop and start it without touching the shared broker."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KAFKA_SH = ROOT / "docker" / "kafka.sh"


def listen_port() -> int:
    """A free port below Linux's ephemeral range (32768-60999), so that no outgoing
    connection of this test session takes it before the broker listens on it."""
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(20_000, 32_000)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port in 20000-32000")


class OwnBroker:
    """Not started: ``run("up")`` starts it, ``run("down")`` stops it, ``restart`` restarts
    it with its data kept, ``close`` stops it for good."""

    def __init__(self, state: Path) -> None:
        self.port = listen_port()
        controller = listen_port()
        while controller == self.port:
            controller = listen_port()
        self.env = {
            **os.environ,
            "KAFKA_STATE_DIR": str(state),
            "KAFKA_PORT": str(self.port),
            "KAFKA_CONTROLLER_PORT": str(controller),
        }
        self.address = f"127.0.0.1:{self.port}"
        self.dir = state / "single"
        self.proc: subprocess.Popen[bytes] | None = None
        shared = ROOT / ".kafka" / "lib"
        if shared.is_dir():  # the jars the shared broker already downloaded
            skip = shutil.ignore_patterns("kafka.jsa*")
            try:  # hard links when possible
                shutil.copytree(shared, state / "lib", ignore=skip, copy_function=os.link)
            except OSError:
                shutil.rmtree(state / "lib", ignore_errors=True)
                shutil.copytree(shared, state / "lib", ignore=skip)

    def run(self, command: str) -> None:
        done = subprocess.run(
            ["bash", str(KAFKA_SH), command],
            env=self.env,
            timeout=180,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        if done.returncode:
            tail = done.stderr.decode(errors="replace")[-3000:]
            raise AssertionError(f"kafka.sh {command} exited {done.returncode}:\n{tail}")

    def restart(self) -> None:
        """`kafka.sh up` starts from empty directories: stop with `kafka.sh down`, then
        start the same command line again."""
        argv = self._argv()
        self.run("down")
        self.start_again(argv)

    def kill(self) -> list[bytes]:
        """SIGKILL the broker (no clean shutdown); return its command line."""
        argv = self._argv()
        pid = self.pid()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and _state(pid) not in ("Z", "X"):
            if time.monotonic() > deadline:
                raise AssertionError(f"broker {pid} still alive 30 s after SIGKILL")
            time.sleep(0.1)
        return argv

    def pid(self) -> int:
        return int((self.dir / "broker.pid").read_text().split()[0])

    def _argv(self) -> list[bytes]:
        return Path(f"/proc/{self.pid()}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")

    def start_again(self, argv: list[bytes]) -> None:
        """Start the broker with this command line (its data kept); wait until it serves."""
        offset = (self.dir / "server.log").stat().st_size
        with (self.dir / "stdout.log").open("ab") as out:
            self.proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        # Recorded where kafka.sh looks, so that `kafka.sh down` stops it at the end.
        (self.dir / "broker.pid").write_text(f"{self.proc.pid}\n")
        deadline = time.monotonic() + 150
        while True:
            with (self.dir / "server.log").open("rb") as log:
                log.seek(offset)
                if b"Kafka Server started" in log.read():
                    return
            if time.monotonic() > deadline:
                raise AssertionError("the broker did not start again within 150 s")
            time.sleep(0.2)

    def close(self) -> None:
        self.run("down")
        if self.proc is not None:
            self.proc.wait(timeout=60)


def _state(pid: int) -> str:
    """The process's state letter (R, S, T, Z...), or "" when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return text.rpartition(")")[2].split()[0]
