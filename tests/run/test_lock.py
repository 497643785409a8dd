"""One run per run directory (run/lock.py): a live holder refuses a second run with one line
naming it, a holder killed with SIGKILL leaves a lock that is taken over, and a clean release
leaves no holder named."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tango_jax.run.lock import LOCK_FILE, RunDirLocked, RunLock

_HOLD = """
import sys, time
from tango_jax.run.lock import RunLock
lock = RunLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
time.sleep(600)
"""


def _holder(run_dir: Path) -> subprocess.Popen:
    """A process that takes run_dir's lock and sleeps (a live run, as far as the lock goes)."""
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout.readline().strip() == "held"
    return child


def test_a_live_holder_refuses_a_second_run_and_keeps_the_lock(tmp_path):
    child = _holder(tmp_path)
    try:
        held = (tmp_path / LOCK_FILE).read_text()
        with pytest.raises(RunDirLocked) as e:
            RunLock(tmp_path).acquire()
        message = str(e.value)
        assert "\n" not in message
        assert f"is in use by host {socket.gethostname()} pid {child.pid} (started 20" in message
        assert "scancel" in message and "--config.run_dir" in message
        assert (tmp_path / LOCK_FILE).read_text() == held  # the holder's line is untouched
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()


def test_a_lock_left_by_kill_9_is_taken_over_with_a_warning(tmp_path, caplog):
    child = _holder(tmp_path)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert str(child.pid) in (tmp_path / LOCK_FILE).read_text()  # the dead holder's line
    with caplog.at_level(logging.WARNING, logger="tango_jax"), RunLock(tmp_path):
        assert (tmp_path / LOCK_FILE).read_text().split()[:2] == [
            socket.gethostname(),
            str(os.getpid()),
        ]
    (warning,) = [r.getMessage() for r in caplog.records if "took over" in r.getMessage()]
    assert f"pid {child.pid}" in warning
    assert (tmp_path / LOCK_FILE).read_text() == ""  # released: no holder named


def test_the_same_process_cannot_hold_one_run_dir_twice(tmp_path):
    """Each RunLock opens the file itself, so two runs in one process also exclude each other
    (flock locks belong to the open file, not the process)."""
    with RunLock(tmp_path), pytest.raises(RunDirLocked):
        RunLock(tmp_path).acquire()
    with RunLock(tmp_path):  # released on exit: free again
        pass
