"""Shape buckets: sizes rounded up to a multiple, so that a run compiles a handful of programs
rather than one per batch shape.

Shared by the train batches (`rl/batch.py`) and the JAX sampler (`rollout/jax_sampler.py`),
so neither layer imports the other for it.
"""

from __future__ import annotations


def round_up(n: int, multiple: int) -> int:
    """The smallest multiple of `multiple` that is >= n, and at least `multiple`."""
    return max(multiple, -(-n // multiple) * multiple)
