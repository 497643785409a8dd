"""OutcomeScorer: answer checks for a batch in worker processes, each item under a hard limit.

`answer_check.score_item` limits an item with SIGALRM, which interrupts Python code but not a
long C call (sympy, big-integer arithmetic). So training and evaluation score batches here: a pool
of worker processes, each started as a fresh interpreter (never forked from the JAX process),
scores one item at a time under the alarm on its main thread, and a worker that has not answered
`grace_s` after its item's limit is killed and replaced. A timed-out or failing item scores 0 and
is counted; nothing blocks the run.

A run's own reward function (config `data.reward`, text/reward_function.py) is scored the same
way, as `RewardKind.CUSTOM`: each worker imports it once at start.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait

import numpy as np

from tango_jax.text import reward_function
from tango_jax.text.answer_check import (
    DEFAULT_TIMEOUT_S,
    ItemResult,
    ItemStatus,
    RewardKind,
    check_timeout,
    score_call,
    score_item,
)

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, eq=False)
class ScoredBatch:
    """Scores of one `OutcomeScorer.score` call.

    scores: [N] float32 in {0, 1} (a custom reward: in [0, 1]). status: [N] `ItemStatus` values,
    how each item's check ended; every item not "ok" scored 0. seconds: wall time of the call.
    """

    scores: np.ndarray
    status: np.ndarray
    seconds: float

    def _is(self, status: ItemStatus) -> np.ndarray:
        return self.status == status.value

    @property
    def timed_out(self) -> np.ndarray:
        return self._is(ItemStatus.TIMEOUT)

    @property
    def errored(self) -> np.ndarray:
        """[N] bool: the check raised (or its worker died)."""
        return self._is(ItemStatus.ERROR)

    @property
    def timeouts(self) -> int:
        return int(self.timed_out.sum())

    @property
    def errors(self) -> int:
        return int(self.errored.sum())

    @property
    def out_of_range(self) -> int:
        """Items whose reward function returned a number outside [0, 1], or NaN."""
        return int(self._is(ItemStatus.OUT_OF_RANGE).sum())

    @property
    def not_a_number(self) -> int:
        """Items whose reward function returned something else than a number or a bool."""
        return int(self._is(ItemStatus.NOT_A_NUMBER).sum())

    def metrics(self, prefix: str) -> dict[str, float]:
        """E.g. prefix "generator/outcome": mean, each kind of failure apart (timeouts, errors:
        raised, out_of_range, not_a_number), seconds."""
        mean = float(self.scores.mean()) if len(self.scores) else 0.0
        return {
            f"{prefix}/mean": mean,
            f"{prefix}/timeouts": float(self.timeouts),
            f"{prefix}/errors": float(self.errors),
            f"{prefix}/out_of_range": float(self.out_of_range),
            f"{prefix}/not_a_number": float(self.not_a_number),
            f"{prefix}/seconds": self.seconds,
        }


@dataclasses.dataclass(frozen=True)
class ScorerStats:
    """Totals over a scorer's life: items scored, each kind of failure, workers restarted."""

    items: int
    timeouts: int
    errors: int
    restarts: int
    out_of_range: int = 0
    not_a_number: int = 0


def _custom_score(fn: reward_function.RewardFunction, question: str, response: str, gold: str):
    return reward_function.checked(fn(response, gold, question))


def _serve(fd: int, reward_spec: str = "") -> None:
    """A worker's loop: receive (index, kind, response, gold, question, timeout_s) on socket
    `fd`, send back (index, score, status, error); a None message or a closed socket ends it.
    Runs in a fresh interpreter started by OutcomeScorer, on its main thread, so the alarm
    works. `reward_spec`: the run's own reward function ("module:function"), for CUSTOM items."""
    conn = Connection(fd)
    custom = reward_function.load(reward_spec) if reward_spec else None
    for kind in RewardKind:  # import everything and warm the caches before saying ready
        if kind is not RewardKind.CUSTOM:
            score_item(kind, "\\boxed{1}", "1", None)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        index, kind, response, gold, question, timeout_s = message
        if RewardKind(kind) is not RewardKind.CUSTOM:
            result = score_item(RewardKind(kind), response, gold, timeout_s)
        elif custom is None:
            result = ItemResult(0.0, ItemStatus.ERROR, "no reward function (data.reward)")
        else:
            result = score_call(
                functools.partial(_custom_score, custom, question), response, gold, timeout_s
            )
        conn.send((index, result.score, result.status.value, result.error))


_MAX_FAILED_STARTS = 3  # workers that die before ready, in a row, before score() gives up


@dataclasses.dataclass
class _Worker:
    proc: subprocess.Popen
    conn: Connection
    started: float
    ready: bool = False
    item: int | None = None
    deadline: float = 0.0


def _start_worker(reward_spec: str = "", reward_root: str = "") -> _Worker:
    """Starts `python -c "..._serve(fd)"` with one end of a socket pair. A fresh interpreter
    (fork+exec in C, safe beside JAX's threads) imports only this module, not the caller's
    __main__ as multiprocessing's spawn would (for `python -m tango_jax.train`: all of JAX).
    `reward_root`: the folder the trainer found the reward function's module in."""
    parent, child = socket.socketpair()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    paths = (root, reward_root, env.get("PYTHONPATH"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    serve = f"_serve({child.fileno()}, {reward_spec!r})"
    code = f"from tango_jax.text.scoring_pool import _serve; {serve}"
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", code],
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=env,
        )
    finally:
        child.close()
    return _Worker(proc, Connection(parent.detach()), time.monotonic())


def _stop_worker(worker: _Worker, *, kill: bool) -> None:
    if not kill:
        try:
            worker.conn.send(None)
            worker.proc.wait(timeout=2.0)
        except (OSError, subprocess.TimeoutExpired):
            kill = True
    if kill:
        worker.proc.kill()
        worker.proc.wait()
    worker.conn.close()


def _stop_all(workers: list[_Worker]) -> None:
    for worker in workers:  # a busy or still-starting worker has nothing to finish
        _stop_worker(worker, kill=worker.item is not None or not worker.ready)
    workers.clear()


def _reward_root(spec: str) -> str:
    return reward_function.module_root(spec) if spec else ""


class OutcomeScorer:
    """Scores (response, gold) pairs in worker processes, each item under a time limit.

    with OutcomeScorer(num_workers=8) as scorer:
        batch = scorer.score(responses, golds, RewardKind.MATH)
        rewards = batch.scores                      # [N] float32
        metrics.update(batch.metrics("generator/outcome"))

    Each item gets `timeout_s` seconds under an alarm inside its worker (a timeout scores 0, is
    counted, and costs nothing more). A worker that has not answered `grace_s` later is stuck in
    C code: it is killed and replaced (about 1 s to start, while the other workers go on), and its
    item scores 0 as a timeout. An item that crashes its worker scores 0 as an error. Per-item
    overhead is one message each way over a local socket (tens of microseconds).

    One `score` call at a time (a lock serialises them). Workers start in the constructor and
    stop in `close` (or at exit of the `with` block).

    `reward_function`: "module:function", the run's own reward (text/reward_function.py),
    scored for `RewardKind.CUSTOM` items; every worker imports it at start. The first error of
    each type (a reward function that raises, an answer that does not parse) is logged with its
    message; all of them are counted.
    """

    def __init__(
        self,
        *,
        num_workers: int = 4,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        grace_s: float = 2.0,
        startup_timeout_s: float = 120.0,
        reward_function: str = "",
    ):
        if num_workers < 1:
            raise ValueError(f"num_workers ({num_workers}) must be >= 1.")
        if min(timeout_s, grace_s, startup_timeout_s) <= 0:
            raise ValueError(
                f"timeout_s ({timeout_s}), grace_s ({grace_s}) and startup_timeout_s "
                f"({startup_timeout_s}) must be > 0 seconds."
            )
        self.timeout_s, self.grace_s, self.startup_timeout_s = timeout_s, grace_s, startup_timeout_s
        self._lock = threading.Lock()
        self._totals = collections.Counter()
        self._failed_starts = 0  # consecutive workers that died before saying ready
        self._reward = (reward_function, _reward_root(reward_function))
        self._logged_errors: set[str] = set()  # error types already logged
        self._workers: list[_Worker] = []
        # Stops the workers on close(), on garbage collection, or at interpreter exit.
        self._finalizer = weakref.finalize(self, _stop_all, self._workers)
        try:
            self._workers.extend(_start_worker(*self._reward) for _ in range(num_workers))
        except BaseException:
            self._finalizer()
            raise

    def __enter__(self) -> OutcomeScorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def stats(self) -> ScorerStats:
        t = self._totals
        return ScorerStats(**{f.name: t[f.name] for f in dataclasses.fields(ScorerStats)})

    def close(self) -> None:
        with self._lock:
            self._finalizer()

    def score(
        self,
        responses: Sequence[str],
        golds: Sequence[str],
        kind: RewardKind = RewardKind.MATH,
        timeout_s: float | None = None,
        questions: Sequence[str] | None = None,
    ) -> ScoredBatch:
        """Scores responses[i] against golds[i] with the `kind` checker: [N] results.

        timeout_s: this call's per-item limit (evaluation may allow more than training);
        default the scorer's `timeout_s`. questions: the problems' questions, which only the
        CUSTOM reward function reads (required for it).
        """
        if len(responses) != len(golds):
            raise ValueError(
                f"responses ({len(responses)}) and golds ({len(golds)}) must have the same length."
            )
        if kind is RewardKind.CUSTOM:
            if not self._reward[0]:
                raise ValueError(
                    "RewardKind.CUSTOM needs the reward function: OutcomeScorer(reward_function="
                    "'module:function') (config data.reward)."
                )
            if questions is None or len(questions) != len(responses):
                raise ValueError(
                    f"RewardKind.CUSTOM needs one question per response ({len(responses)}), got "
                    f"{None if questions is None else len(questions)}."
                )
        questions = questions if kind is RewardKind.CUSTOM else None
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        check_timeout(timeout_s)
        n, start = len(responses), time.monotonic()
        scores = np.zeros(n, np.float32)
        status = np.full(n, ItemStatus.OK.value, dtype=object)
        with self._lock:
            if not self._workers:
                raise RuntimeError("OutcomeScorer.score called after close(); make a new scorer.")
            for worker in list(self._workers):  # still busy from a call that was interrupted
                if worker.item is not None:
                    self._replace(worker, kill=True)
            todo, left = collections.deque(range(n)), n
            while left:
                self._dispatch(todo, responses, golds, questions, kind, timeout_s)
                for index, score, item_status, error in self._collect():
                    scores[index], status[index] = score, item_status
                    self._log_first(item_status, error)
                    left -= 1
        batch = ScoredBatch(scores, status, time.monotonic() - start)
        self._totals.update(
            items=n,
            timeouts=batch.timeouts,
            errors=batch.errors,
            out_of_range=batch.out_of_range,
            not_a_number=batch.not_a_number,
        )
        return batch

    def _log_first(self, status: str, error: str) -> None:
        """Logs the first failure of each kind with its message (the exception, or the value
        returned: what to fix); a raise is a kind per exception type. Later ones are only
        counted."""
        if not error:
            return
        returned = status in (ItemStatus.OUT_OF_RANGE.value, ItemStatus.NOT_A_NUMBER.value)
        metric = status if returned else "errors"
        kind = status if returned else error.partition(":")[0]
        if kind not in self._logged_errors:
            self._logged_errors.add(kind)
            log.warning(
                "an answer could not be scored and counts 0 (%s); further such cases are only "
                "counted, in the */reward/%s metrics",
                error,
                metric,
            )

    def _dispatch(
        self, todo: collections.deque, responses, golds, questions, kind, timeout_s
    ) -> None:
        for worker in self._workers:
            if worker.ready and worker.item is None and todo:
                index = todo.popleft()
                question = "" if questions is None else questions[index]
                message = (index, kind.value, responses[index], golds[index], question, timeout_s)
                try:
                    worker.conn.send(message)
                except OSError:  # it died while idle: retry the item on another worker
                    todo.appendleft(index)
                    self._replace(worker, kill=True)
                    continue
                worker.item = index
                worker.deadline = time.monotonic() + timeout_s + self.grace_s

    def _collect(self) -> list[tuple[int, float, str, str]]:
        """Waits for the next message or deadline; returns the items finished meanwhile."""
        now = time.monotonic()
        deadlines = [w.deadline for w in self._workers if w.item is not None]
        deadlines += [w.started + self.startup_timeout_s for w in self._workers if not w.ready]
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        by_conn = {w.conn: w for w in self._workers}
        done = []
        for conn in wait(list(by_conn), timeout=timeout):
            worker = by_conn[conn]
            try:
                message = conn.recv()
            except (EOFError, OSError):  # the worker died (crash, out of memory, killed)
                if not worker.ready:
                    self._failed_starts += 1
                    if self._failed_starts >= _MAX_FAILED_STARTS:
                        raise RuntimeError(self._startup_failure(worker)) from None
                if worker.item is not None:
                    done.append((worker.item, 0.0, ItemStatus.ERROR.value, "the worker died"))
                self._replace(worker, kill=True)
                continue
            if message[0] == "ready":
                worker.ready = True
                self._failed_starts = 0
            else:
                done.append(message)
                worker.item = None
        now = time.monotonic()
        for worker in list(self._workers):
            if worker.item is not None and now > worker.deadline:
                done.append((worker.item, 0.0, ItemStatus.TIMEOUT.value, ""))
                self._replace(worker, kill=True)
            elif not worker.ready and now > worker.started + self.startup_timeout_s:
                raise RuntimeError(self._startup_failure(worker))
        return done

    def _replace(self, worker: _Worker, *, kill: bool) -> None:
        worker.item = None
        _stop_worker(worker, kill=kill)
        self._workers[self._workers.index(worker)] = _start_worker(*self._reward)
        self._totals.update(restarts=1)

    def _startup_failure(self, worker: _Worker) -> str:
        return (
            f"OutcomeScorer workers fail to start: worker pid {worker.proc.pid} exited with code "
            f"{worker.proc.poll()} (None: still running after startup_timeout_s = "
            f"{self.startup_timeout_s} s), {self._failed_starts} deaths in a row. Its error is "
            f"on stderr above; check that `{sys.executable} -c "
            '"import tango_jax.text.scoring_pool, math_verify"` works, or raise '
            "startup_timeout_s on a loaded machine."
        )
