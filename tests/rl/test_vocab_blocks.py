"""The vocabulary-blocked log-prob head (rl.vocab_blocks) against the whole-vocabulary path of
`losses.token_logprobs` (the current implementation) and the float64 NumPy reference."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import numpy_reference as ref
import pytest

from tango_jax.rl import losses
from tango_jax.rl.train_step import LossConfig


def inputs(seed, b=3, t=13, d=8, v=29, dtype=jnp.float32):
    rng = np.random.default_rng(seed)
    hidden = jnp.asarray(rng.normal(size=(b, t, d)) * 2.0, dtype)  # peaked softmaxes too
    lm_head = jnp.asarray(rng.normal(size=(d, v)) / math.sqrt(d), dtype)
    targets = rng.integers(0, v, size=(b, t))
    targets[0, :3] = (0, v - 1, 7)  # the first and the last (padded-block) columns
    return hidden, lm_head, jnp.asarray(targets, jnp.int32)


# block 8 of 29 columns: 4 blocks, the last with 3 pad columns; 29: one exact block; chunk 4
# runs the lax.map + remat path, 64 the single-chunk one.
@pytest.mark.parametrize("block, chunk, temperature", [(8, 4, 0.7), (8, 64, 1.0), (5, 4, 1.3)])
def test_values_equal_the_whole_vocabulary_path_and_numpy(block, chunk, temperature):
    hidden, lm_head, targets = inputs(0)
    kw = dict(temperature=temperature, chunk_size=chunk, with_entropy=True)
    got = losses.token_logprobs(hidden, lm_head, targets, vocab_block=block, **kw)
    current = losses.token_logprobs(hidden, lm_head, targets, **kw)
    numpy = ref.token_logprobs(
        np.asarray(hidden), np.asarray(lm_head), np.asarray(targets), temperature
    )
    for g, c, n in zip(got, current, numpy):
        assert g.dtype == jnp.float32 and g.shape == targets.shape
        np.testing.assert_allclose(g, c, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(g, n, rtol=1e-5, atol=1e-5)
    logp_only, none = losses.token_logprobs(
        hidden, lm_head, targets, vocab_block=block, chunk_size=chunk, temperature=temperature
    )
    assert none is None
    np.testing.assert_allclose(logp_only, got[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype, tol", [(jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)])
@pytest.mark.parametrize("with_entropy", [True, False])
def test_gradients_equal_the_whole_vocabulary_path(dtype, tol, with_entropy):
    hidden, lm_head, targets = inputs(1, dtype=dtype)
    w = jnp.asarray(np.random.default_rng(2).normal(size=targets.shape), jnp.float32)

    def grads(block):
        def f(h, head):
            logp, ent = losses.token_logprobs(
                h,
                head,
                targets,
                temperature=0.9,
                chunk_size=4,
                with_entropy=with_entropy,
                vocab_block=block,
            )
            return jnp.sum(w * logp) + (0.3 * jnp.sum(w * ent) if with_entropy else 0.0)

        return jax.jit(jax.grad(f, argnums=(0, 1)))(hidden, lm_head)

    for got, want in zip(grads(8), grads(0)):
        assert got.dtype == dtype and got.shape == want.shape
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        assert np.linalg.norm(got - want) <= tol * np.linalg.norm(want), np.linalg.norm(
            got - want
        ) / np.linalg.norm(want)


def test_gradient_of_the_blocked_head_is_the_finite_difference():
    """In float64 (x64 off: float32), a central difference of the blocked loss itself."""
    hidden, lm_head, targets = inputs(3, b=1, t=3, d=4, v=11)

    def f(head):
        logp, ent = losses.token_logprobs(
            hidden, head, targets, with_entropy=True, vocab_block=4, temperature=0.8
        )
        return jnp.sum(logp) + 0.5 * jnp.sum(ent)

    g = np.asarray(jax.grad(f)(lm_head))
    eps = 1e-2
    for i, j in [(0, 0), (1, 5), (3, 10), (2, int(targets[0, 0]))]:
        e = jnp.zeros_like(lm_head).at[i, j].set(eps)
        fd = (float(f(lm_head + e)) - float(f(lm_head - e))) / (2 * eps)
        np.testing.assert_allclose(g[i, j], fd, rtol=2e-2, atol=2e-3)


def test_no_float32_logits_over_the_whole_vocabulary():
    """The blocked gradient's scratch holds [B, C, block] logits, not [B, C, V]."""
    b, t, d, v, block = 2, 64, 16, 8192, 512
    shapes = (
        jax.ShapeDtypeStruct((b, t, d), jnp.float32),
        jax.ShapeDtypeStruct((d, v), jnp.float32),
        jax.ShapeDtypeStruct((b, t), jnp.int32),
    )

    def temp_bytes(vocab_block):
        def loss(h, head, y):
            logp, ent = losses.token_logprobs(
                h, head, y, chunk_size=t, with_entropy=True, vocab_block=vocab_block
            )
            return jnp.sum(logp) + jnp.sum(ent)

        compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(*shapes).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    logits_bytes = b * t * v * 4
    assert temp_bytes(0) >= logits_bytes  # the measurement sees whole-vocabulary logits
    # what remains: the [D, V] gradient of the head and a few [B, T, block] buffers
    assert temp_bytes(block) < d * v * 4 + 8 * b * t * block * 4, temp_bytes(block)


def test_vocab_block_is_validated_and_switchable_from_the_loss_config():
    hidden, lm_head, targets = inputs(0)
    with pytest.raises(ValueError, match="vocab_block"):
        losses.token_logprobs(hidden, lm_head, targets, vocab_block=-1)
    with pytest.raises(ValueError, match="logprob_vocab_block"):
        LossConfig(logprob_vocab_block=-2)
    assert LossConfig().logprob_vocab_block == 0  # the whole-vocabulary path stays the default
