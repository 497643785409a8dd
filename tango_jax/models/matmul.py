"""Matrix products over token axes, written as 2-D matmuls."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def dense(x: jax.Array, w: jax.Array, in_axes: int = 1, preferred_element_type=None) -> jax.Array:
    """x [*tokens, *in] @ w [*in, *out] -> [*tokens, *out], as one 2-D matrix product.

    The same sums as `jnp.einsum` over the `in_axes` trailing axes of x. The token axes
    (batch, length) are flattened into one row axis first: XLA:CPU lowers the backward of the
    multi-axis form (the weight gradient contracts over batch and length together) through
    transposing copies of the activations' gradient, which cost more than the matmuls they feed
    (the tiny model's MLP forward + backward: 80 ms as einsums, 49 ms flattened, one core). On
    GPUs the reshapes are free bitcasts.
    """
    in_shape, out_shape = w.shape[:in_axes], w.shape[in_axes:]
    tokens = x.shape[: x.ndim - in_axes]
    if x.shape[x.ndim - in_axes :] != in_shape:
        raise ValueError(
            f"dense: the last {in_axes} axes of x {x.shape} must equal the first {in_axes} of "
            f"w {w.shape}."
        )
    y = jnp.dot(
        x.reshape(-1, math.prod(in_shape)),
        w.reshape(math.prod(in_shape), -1),
        preferred_element_type=preferred_element_type,
    )
    return y.reshape(*tokens, *out_shape)
