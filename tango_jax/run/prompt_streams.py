"""The prompt streams of a run's two phases: one shared by the generator's and the verifier's
updates (the paper's code, `data.verifier_stream=False`), or a stream of the verifier's own
(`data.verifier_stream=True`), so that the generator's updates of a Tango run take exactly the
batches a GRPO run of the same `data.seed` takes (a paired study; docs/config.md).

    streams = PhaseStreams(generator_stream, verifier_stream_or_None)
    batch = streams.for_phase(phase).next_batch()
    saved = streams.positions()          # (the generator's / shared one, the verifier's or None)
"""

from __future__ import annotations

from tango_jax.data.datasets import StreamPosition
from tango_jax.data.task import Stream
from tango_jax.tango.kind import Kind
from tango_jax.tango.schedule import Phase

# The verifier's own stream: the same task, its order (and, for generated tasks, its problems)
# keyed by data.seed + this, so it never coincides with the generator's stream of a study seed.
VERIFIER_SEED_OFFSET = 7919


class PhaseStreams:
    """`generator`: the stream of generator steps (and of every step without `verifier`);
    `verifier`: the verifier steps' own (warm-up included), or None to share."""

    def __init__(self, generator: Stream, verifier: Stream | None = None):
        self.generator, self.verifier = generator, verifier

    def for_phase(self, phase: Phase) -> Stream:
        if self.verifier is not None and phase.kind is Kind.VERIFIER:
            return self.verifier
        return self.generator

    def positions(self) -> tuple[StreamPosition, StreamPosition | None]:
        """Where each stream stands (what a checkpoint saves)."""
        return self.generator.position, None if self.verifier is None else self.verifier.position
