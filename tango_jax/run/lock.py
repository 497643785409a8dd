"""One run per run directory: `run_dir/run.lock`, held for the whole run.

    with RunLock(run_dir):          # RunDirLocked if a live run holds it
        TangoLoop(cfg, mesh).run()

The lock is an exclusive `flock` on the file (the kernel drops it when its process dies, kill
-9 included) and the file's text names the holder: `host pid start-time`. A second launch into
a live run directory is refused at once with that line and the fix; a lock whose holder is gone
(the file is there, nobody holds the flock) is taken over with a warning naming the old holder.
Where the file system has no `flock` (some NFS or Lustre mounts), the holder's pid is checked
instead when it ran on this host; a holder on another host cannot be checked from here, so the
launch is refused with the line that says how to remove a lock known to be stale.

Several trainer processes (`jax.distributed`) hold it as one run: process 0 takes it and every
process learns the outcome, so all of them stop together when it is refused.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import logging
import os
import socket
from pathlib import Path

import jax
import numpy as np
from jax.experimental import multihost_utils

log = logging.getLogger("tango_jax")

LOCK_FILE = "run.lock"


class RunDirLocked(RuntimeError):
    """Another live run holds the run directory."""


def _holder_text() -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{socket.gethostname()} {os.getpid()} {now}\n"


def _describe(text: str) -> str:
    parts = text.split()
    if len(parts) != 3:
        return f"an unknown holder ({text.strip()!r})"
    host, pid, started = parts
    return f"host {host} pid {pid} (started {started})"


def _pid_alive_here(text: str) -> bool | None:
    """Whether the holder named by `text` is alive, when it ran on this host (None: unknown)."""
    parts = text.split()
    if len(parts) != 3 or parts[0] != socket.gethostname() or not parts[1].isdigit():
        return None
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """Holds `run_dir/run.lock` while entered (creating run_dir if needed)."""

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None
        self._created: list[Path] = []  # what acquire made: removed again if nothing else was

    def _refuse(self, text: str) -> RunDirLocked:
        return RunDirLocked(
            f"run_dir {self.path.parent} is in use by {_describe(text)} (lock {self.path}): "
            "wait for that run to end or stop it (kill the pid, or scancel its job), or "
            "choose another --config.run_dir; if that process is known to be gone, delete "
            f"{self.path}."
        )

    def acquire(self) -> None:
        self._created = [p for p in (self.path.parent, self.path) if not p.exists()]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            previous = os.pread(fd, 4096, 0).decode(errors="replace")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise self._refuse(previous) from None
            except OSError as e:  # no flock on this file system: judge by the pid
                if e.errno not in (errno.ENOLCK, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise
                if previous.strip() and _pid_alive_here(previous) is not False:
                    raise self._refuse(previous) from None
            if previous.strip():
                log.warning(
                    "took over the lock %s left by %s, which is no longer running (it was "
                    "killed or crashed; the run resumes from its last checkpoint)",
                    self.path,
                    _describe(previous),
                )
            os.ftruncate(fd, 0)
            os.pwrite(fd, _holder_text().encode(), 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        """Empties the file (a clean end leaves no holder behind) and drops the flock. A run
        refused before it wrote anything (e.g. prompts found too long once tokenized) leaves the
        directory as it found it: a lock file and run_dir that acquire created are removed
        while they hold nothing else."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
            if self.path in self._created and os.listdir(self.path.parent) == [LOCK_FILE]:
                self.path.unlink()
                if self.path.parent in self._created:
                    self.path.parent.rmdir()
        finally:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class RunLockAllProcesses:
    """`RunLock` taken by process 0 for every trainer process: all of them raise RunDirLocked
    (with process 0's message) when it is refused. Collective on entry."""

    def __init__(self, run_dir: str | os.PathLike):
        self.run_dir = Path(run_dir)
        self.lock = RunLock(run_dir) if jax.process_index() == 0 else None

    def __enter__(self) -> RunLockAllProcesses:
        refused: RunDirLocked | None = None
        if self.lock is not None:
            try:
                self.lock.acquire()
            except RunDirLocked as e:
                refused = e
        if jax.process_count() > 1:
            took = multihost_utils.broadcast_one_to_all(np.int32(refused is None))
            if not took and refused is None:
                raise RunDirLocked(
                    f"run_dir {self.run_dir} is in use by another run (lock "
                    f"{self.run_dir / LOCK_FILE}): process 0's message names the holder and "
                    "the fix."
                )
        if refused is not None:
            raise refused
        return self

    def __exit__(self, *exc) -> None:
        if self.lock is not None:
            self.lock.release()
