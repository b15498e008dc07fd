"""One process per alert state directory: an advisory lock on ``<state_dir>/lock``.

The spool, the sent-log and the failed log of a state directory belong to one dispatcher at
a time: two processes sharing them would each deliver the other's spooled messages and
compact the files under each other. A dispatcher takes an exclusive ``flock`` on the
directory's ``lock`` file when it starts and lets it go when it closes (or its process ends,
however it ends: the kernel releases the lock). A second process gets
:class:`StateDirInUse`, naming the directory and the process that holds it: give each
process its own ``--alert-state-dir``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

__all__ = ["StateDirInUse", "StateLock"]


class StateDirInUse(ValueError):
    """The state directory is locked by another dispatcher (a setting to change)."""


class StateLock:
    """The lock of one state directory, held from construction until :meth:`release`."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "lock"
        state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise StateDirInUse(
                f"the alert state directory {state_dir} is in use by another streamwatch "
                f"process (pid {holder}); give each process its own --alert-state-dir "
                "(or STREAMWATCH_ALERT_STATE_DIR)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd: int | None = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the descriptor releases the lock
