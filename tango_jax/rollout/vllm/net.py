"""Small helpers that the server, the weight sync and the gloo transport share, so that none of
them borrows from another: a free TCP port, a blocking network call run in a daemon thread, and
the timeout error of a weight transfer.

No torch, no vLLM, no JAX: importing this module is free.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any


class WeightTransferTimeout(TimeoutError):
    """A rendezvous or transfer step did not finish within the configured `timeout_s`."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` now (for a server or a rendezvous to bind next)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def in_daemon_thread(fn: Callable[[], Any]) -> Future:
    """Runs `fn` in a daemon thread (a stuck HTTP call or rendezvous must not block exit)."""
    future: Future = Future()

    def run():
        try:
            future.set_result(fn())
        except BaseException as e:
            future.set_exception(e)

    threading.Thread(target=run, daemon=True).start()
    return future
