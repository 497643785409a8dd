"""Stop signals (run/signals.py): the first one is caught and recorded, a second one ends the
process at once with the signal's own status; the time-based checkpoint clock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from tango_jax.run.signals import ExitStatus, StopPoint, StopSignals

_TWICE = """
import os, signal, sys, time
from tango_jax.run.signals import StopSignals
with StopSignals() as stop:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.1)  # the handler runs between bytecodes
    print(stop.signal_name, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
print("not reached", flush=True)
"""


def test_first_signal_is_recorded_and_a_second_exits_at_once():
    t0 = time.monotonic()
    child = subprocess.run([sys.executable, "-c", _TWICE], capture_output=True, text=True)
    assert child.stdout.split() == ["SIGTERM"], child.stderr
    assert child.returncode == -signal.SIGTERM  # the shell reports 143
    assert "again: exiting at once" in child.stderr
    assert time.monotonic() - t0 < 30


def test_every_stop_signal_is_caught_and_handlers_are_restored():
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)}
    for s in before:
        with StopSignals() as stop:
            os.kill(os.getpid(), s)
            time.sleep(0.05)
            assert stop.requested and stop.signal_name == s.name
    assert {s: signal.getsignal(s) for s in before} == before


def test_stop_point_agrees_on_the_signal_and_the_clock():
    with StopSignals() as stop:
        point = StopPoint(stop, every_minutes=0.5 / 60)  # half a second
        assert point.agree() == (False, False)
        time.sleep(0.6)
        assert point.agree() == (False, True)
        point.saved()
        assert point.agree() == (False, False)
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.05)
        assert point.agree() == (True, False)
    assert StopPoint(None, every_minutes=0).agree() == (False, False)
    assert (ExitStatus.STOPPED, ExitStatus.RUN_DIR_LOCKED) == (75, 73)
