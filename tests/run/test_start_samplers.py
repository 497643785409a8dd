"""run.roles.start_samplers: the roles' unstarted vLLM samplers start at the same time, and a
failure leaves no sampler running. The samplers here are stand-ins with the two methods it
calls (start, close); the real servers starting side by side are checked by the vLLM service
run (tests/e2e/test_loop.py)."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from tango_jax.run.roles import start_samplers


class _Sampler:
    def __init__(self, seconds: float, error: Exception | None = None, started: bool = False):
        self.seconds, self.error, self.started = seconds, error, started
        self.span: tuple[float, float] | None = None
        self.closed = False

    def start(self):
        began = time.monotonic()
        time.sleep(self.seconds)
        self.span = (began, time.monotonic())
        self.started = True
        if self.error is not None:
            raise self.error

    def close(self):
        self.closed = True


def _roles(*samplers):
    return [SimpleNamespace(sampler=s) for s in samplers]


def test_unstarted_samplers_start_at_the_same_time_and_others_are_left_alone():
    a, b = _Sampler(0.3), _Sampler(0.3)
    embedded = SimpleNamespace(close=lambda: None)  # a JAX sampler: nothing to start
    already = _Sampler(0.0, started=True)
    start_samplers(_roles(a, embedded, b, already))
    assert a.started and b.started and already.span is None
    assert max(a.span[0], b.span[0]) < min(a.span[1], b.span[1])  # overlapping starts
    assert not (a.closed or b.closed)


def test_a_failed_start_closes_every_sampler_after_the_others_finish_and_raises_it():
    slow, failing = _Sampler(0.3), _Sampler(0.0, RuntimeError("vllm-0 exited with code 1"))
    other = SimpleNamespace(sampler=_Sampler(0.0, started=True))
    with pytest.raises(RuntimeError, match="exited with code 1"):
        start_samplers([*_roles(slow, failing), other])
    assert slow.started and slow.closed and failing.closed and other.sampler.closed
