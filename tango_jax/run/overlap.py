"""Overlapped rollouts: step s+1's rollouts are collected while step s's update runs.

    ahead = Prefetch(problems, collect_fn, background=True, samplers=[gen.sampler, ...])
    generator_step(ctx, rollouts, ..., during_update=ahead)   # start() .. update .. join()
    next_rollouts = ahead.rollouts                            # None: collect again, in front

This is veRL's "one-step off-policy" pipeline (also OpenRLHF's async mode and the JAX-Toolbox
inference offloading): the sampling service generates the next batch with the weights it has
while the trainer updates, and the sync follows the join. Which weights produced what, with
the schedule [G x N_g, V x N_v]:

* Step s+1's whole collection (generator samples, their rule scores, the verifier's judgments
  of them) runs during step s's update, on the weights of both models after step s-1.
* So the role trained at step s is one update behind in step s+1's rollouts; the other role
  is current. In [G, G, G, V]: G after G trains on its own samples from one update ago (lag
  1); the first G after V trains on current samples but its verifier feedback is one
  verifier update old; the V after G trains on current verifier samples, judging generator
  solutions one generator update old. `<role>/policy_lag` (trained samples),
  `generator/feedback/verifier_lag` and `verifier/solutions/generator_lag` log it per batch
  from the weight version each completion carries.
* The trainer corrects its own lag with truncated importance sampling against the sampler's
  log-probs (`trainer.loss.tis_cap`, or a sampler-log-prob PPO ratio), which the config then
  requires.

Where it runs. With every enabled role sampled by vLLM, in a background thread: HTTP requests
to separate servers and the scorer's processes, while the jitted update runs on the trainer's
devices. With the embedded JAX sampler (it samples on the trainer's devices with the trainer's
own arrays, which the update donates) the same collection runs right before the update:
identical semantics and lags, no time saved (tests, ablations).

Exact resume. The pipeline is drained at every checkpoint step: nothing is prefetched during
the update of a step that is saved, so a checkpoint never has a rollout in flight, and a run
resumed from it collects the next step after the restore exactly as the uninterrupted run did
(sampling seeds are a function of (seed, step, purpose)). Changing `checkpoint.every_steps` on
resume moves the drain points, so the resumed run is then off-policy at other steps. With
dynamic sampling a prefetch draws its extra prompt batches from the stream as it runs (beside
the update, while the loop does not touch the stream); the position a checkpoint saves is taken
before a prefetch is planned, so a resumed run draws them again in the same order.

Failures. A background collection that fails (a vLLM server died and cannot be sent the
weights it needs, which are being updated) is logged and counted (`rollout/prefetch_failed`);
its problems are collected again after the sync, in the foreground, on the new weights. Its
results are never partially used.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

from tango_jax.metrics.writer import PhaseTimer

if TYPE_CHECKING:
    from tango_jax.rollout.base import Sampler

log = logging.getLogger("tango_jax")

# What `collect` takes (the loop's run.dynamic_sampling.StepBatches) and returns (its
# run.steps.Rollouts); Prefetch only holds them.
Q = TypeVar("Q")
R = TypeVar("R")


class Prefetch(Generic[Q, R]):
    """One step's collection, run beside another step's update.

    problems: the step's prompts (the loop's StepBatches: the first batch taken from the stream
    when the prefetch is planned, extra ones on first use, so a failed prefetch re-collects the
    same ones); collect: problems, timer -> R (the loop's Rollouts);
    background: run in a thread (vLLM) or synchronously at `start` (the embedded sampler);
    samplers: held (`Sampler.hold_weights`) while a background collection runs.
    """

    def __init__(
        self,
        step: int,
        problems: Q,
        collect: Callable[[Q, PhaseTimer], R],
        *,
        background: bool,
        samplers: Sequence[Sampler] = (),
    ):
        self.step, self.problems = step, problems
        self.background = background
        self.rollouts: R | None = None
        self.error: Exception | None = None
        self.timer = PhaseTimer()
        self.seconds = 0.0
        self._collect, self._samplers = collect, samplers
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not self.background:  # the embedded sampler: its errors are the run's
            self._run(catch=False)
            return
        self._thread = threading.Thread(
            target=self._run, kwargs=dict(catch=True), name=f"prefetch-step-{self.step}"
        )
        self._thread.daemon = True  # a run that stops mid-update does not wait for it
        self._thread.start()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.error is not None:
            log.warning(
                "prefetching step %d's rollouts failed (%s: %s); they are collected again "
                "after the weight sync",
                self.step,
                type(self.error).__name__,
                self.error,
            )

    def _run(self, *, catch: bool) -> None:
        t0 = time.perf_counter()
        try:
            with contextlib.ExitStack() as held:
                for sampler in self._samplers:
                    held.enter_context(sampler.hold_weights())
                self.rollouts = self._collect(self.problems, self.timer)
        except Exception as e:
            if not catch:
                raise
            self.rollouts, self.error = None, e
        finally:
            self.seconds = time.perf_counter() - t0

    def metrics(self) -> dict[str, float]:
        """Of the step whose update it ran beside: the collection's own time (not part of
        `perf/step_s`, which holds only `perf/prefetch_wait_s`: what the update did not hide),
        its phases, and whether it failed."""
        phases = self.timer.metrics()
        phases.pop("perf/step_s")
        out = {k.replace("perf/", "perf/prefetch/", 1): v for k, v in phases.items()}
        out["perf/prefetch_s"] = self.seconds
        out["rollout/prefetch_failed"] = float(self.error is not None)
        return out
