"""tango_jax.rl.losses against the NumPy references, hand-worked cases and naive JAX code."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import numpy_reference as ref
import pytest
from jaxpr_dots import dot_operands

from tango_jax.rl import losses

B, T = 6, 10


def masks(rng, batch=B, length=T, empty_rows=()):
    lengths = rng.integers(1, length + 1, size=batch)
    lengths[list(empty_rows)] = 0
    return (np.arange(length)[None, :] < lengths[:, None]).astype(np.float32)


def policy_inputs(seed):
    rng = np.random.default_rng(seed)
    old = rng.normal(-2.0, 1.0, size=(B, T)).astype(np.float32)
    logp = (old + rng.normal(0.0, 0.4, size=(B, T))).astype(np.float32)  # ratios ~0.3..3
    logp[:, 0] = old[:, 0] + 1.5  # ratio 4.5: beyond a dual clip of 3
    adv = rng.normal(size=(B, T)).astype(np.float32)
    adv[:, 0] = -np.abs(adv[:, 0])
    return logp, old, adv, masks(rng)


# ----------------------------------------------------------------------------------------------
# PPO loss.


@pytest.mark.parametrize(
    "clip_low, clip_high, dual_clip", [(0.2, 0.2, None), (0.2, 0.28, None), (0.1, 0.3, 3.0)]
)
@pytest.mark.parametrize("weighted", [False, True])
def test_ppo_loss_matches_reference(clip_low, clip_high, dual_clip, weighted):
    logp, old, adv, mask = policy_inputs(0)
    weights = np.linspace(0.5, 2.0, B).astype(np.float32) if weighted else None
    loss, stats = losses.ppo_policy_loss(
        logp,
        old,
        adv,
        mask,
        clip_low=clip_low,
        clip_high=clip_high,
        dual_clip=dual_clip,
        sample_weights_B=weights,
    )
    expected = ref.ppo_loss(logp, old, adv, clip_low, clip_high, dual_clip, weights) * mask
    np.testing.assert_allclose(loss, expected, rtol=1e-5, atol=1e-6)
    ratio = np.exp(logp.astype(np.float64) - old)
    np.testing.assert_allclose(stats["ratio"], ratio * mask, rtol=1e-5)
    np.testing.assert_allclose(stats["ppo_kl"], (old - logp) * mask, rtol=1e-5, atol=1e-6)
    clipped = -adv * np.clip(ratio, 1 - clip_low, 1 + clip_high) > -adv * ratio
    np.testing.assert_array_equal(stats["clipfrac"], clipped * mask)
    assert 0 < stats["clipfrac"].sum() < mask.sum()  # the inputs exercise both branches
    if dual_clip is not None:
        assert stats["dual_clipfrac"].sum() > 0


def test_ppo_loss_hand_worked():
    logp = jnp.log(jnp.array([[1.0, 1.5, 0.5, 5.0]]))
    old = jnp.zeros((1, 4))
    adv = jnp.array([[2.0, 1.0, 1.0, -1.0]])
    mask = jnp.ones((1, 4))
    loss, stats = losses.ppo_policy_loss(logp, old, adv, mask)
    # ρ=1: -A; ρ=1.5, A>0: clipped at 1.2; ρ=0.5, A>0: unclipped -0.5; ρ=5, A<0: -A·ρ = 5.
    np.testing.assert_allclose(loss, [[-2.0, -1.2, -0.5, 5.0]], rtol=1e-6)
    np.testing.assert_array_equal(stats["clipfrac"], [[0, 1, 0, 0]])
    loss, stats = losses.ppo_policy_loss(logp, old, adv, mask, dual_clip=3.0)
    np.testing.assert_allclose(loss, [[-2.0, -1.2, -0.5, 3.0]], rtol=1e-6)
    np.testing.assert_array_equal(stats["dual_clipfrac"], [[0, 0, 0, 1]])
    # A [B] advantage broadcasts over tokens.
    loss_b, _ = losses.ppo_policy_loss(logp, old, jnp.array([1.0]), mask)
    loss_bt, _ = losses.ppo_policy_loss(logp, old, jnp.ones((1, 4)), mask)
    np.testing.assert_array_equal(loss_b, loss_bt)


def test_ppo_loss_ignores_garbage_at_padding():
    logp, old, adv, mask = policy_inputs(1)
    logp = np.where(mask > 0, logp, 1e4).astype(np.float32)  # exp would overflow
    grad = jax.grad(lambda lp: losses.ppo_policy_loss(lp, old, adv, mask)[0].sum())(logp)
    assert np.all(np.isfinite(grad)) and np.all(np.asarray(grad)[mask == 0] == 0.0)


def test_ppo_loss_validates():
    x = jnp.zeros((1, 2))
    with pytest.raises(ValueError, match="dual_clip"):
        losses.ppo_policy_loss(x, x, x, x, dual_clip=0.5)
    with pytest.raises(ValueError, match="clip_low"):
        losses.ppo_policy_loss(x, x, x, x, clip_low=1.0)


# ----------------------------------------------------------------------------------------------
# KL, entropy, total.


@pytest.mark.parametrize("kind", ["kl", "abs", "mse", "low_var_kl"])
def test_kl_estimates_match_reference(kind):
    rng = np.random.default_rng(2)
    logp = rng.normal(-2.0, 1.0, size=(B, T)).astype(np.float32)
    ref_logp = (logp + rng.normal(0.0, 3.0, size=(B, T))).astype(np.float32)
    np.testing.assert_allclose(
        losses.kl_estimate(logp, ref_logp, kind),
        ref.kl(logp, ref_logp, kind),
        rtol=1e-5,
        atol=1e-5,
    )


def test_kl_direction_and_clamp():
    logp, ref_logp = jnp.array([[-1.0, -20.0]]), jnp.array([[-2.0, -1.0]])
    np.testing.assert_allclose(losses.kl_estimate(logp, ref_logp, "kl"), [[1.0, -19.0]])
    # k3 = exp(ref - logp) - (ref - logp) - 1 >= 0, and the clamp at 10.
    k3 = np.asarray(losses.kl_estimate(logp, ref_logp, losses.KLEstimator.K3))
    np.testing.assert_allclose(k3[0, 0], math.exp(-1.0) + 1.0 - 1.0, rtol=1e-6)
    assert k3[0, 1] == 10.0


def test_entropy_from_logits():
    logits = np.random.default_rng(3).normal(size=(4, 7, 13)).astype(np.float32)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(
        losses.entropy_from_logits(logits), -(p * np.log(p)).sum(-1), rtol=1e-5
    )
    uniform = losses.entropy_from_logits(jnp.zeros((2, 5)))
    np.testing.assert_allclose(uniform, [math.log(5)] * 2, rtol=1e-6)


def test_total_loss_per_token_signs():
    pg, ent, kl = jnp.array([[1.0]]), jnp.array([[2.0]]), jnp.array([[4.0]])
    total = losses.total_loss_per_token(
        pg, entropy_BxT=ent, entropy_coef=0.1, kl_BxT=kl, kl_coef=0.01
    )
    np.testing.assert_allclose(total, [[1.0 - 0.2 + 0.04]], rtol=1e-6)


# ----------------------------------------------------------------------------------------------
# Aggregation across micro-batches.


def accumulate(values, mask, mode, num_micro):
    sums = counts = 0.0
    for v, m in zip(np.split(values, num_micro), np.split(mask, num_micro)):
        s, c = losses.aggregate(v, m, mode)
        sums, counts = sums + float(s), counts + float(c)
    return sums / counts


def test_aggregation_modes_across_micro_batch_splits():
    rng = np.random.default_rng(4)
    values = rng.normal(size=(8, T)).astype(np.float32)
    mask = masks(rng, batch=8, empty_rows=(5,))
    token_mean = values[mask > 0].mean()
    seq_means = [values[i][mask[i] > 0].mean() for i in range(8) if mask[i].sum() > 0]
    per_split = {}
    for num_micro in (1, 2, 4):
        assert accumulate(values, mask, "token-mean", num_micro) == pytest.approx(token_mean)
        assert accumulate(values, mask, "seq-mean-token-mean", num_micro) == pytest.approx(
            np.mean(seq_means)
        )
        micro_means = [
            v[m > 0].mean() for v, m in zip(np.split(values, num_micro), np.split(mask, num_micro))
        ]
        per_split[num_micro] = accumulate(values, mask, "microbatch-token-mean", num_micro)
        assert per_split[num_micro] == pytest.approx(np.mean(micro_means))
    assert per_split[1] == pytest.approx(token_mean)
    # The official mode depends on the micro-batch size; the other two do not.
    assert abs(per_split[1] - per_split[4]) > 1e-3 and abs(per_split[2] - per_split[4]) > 1e-3


def test_constant_norm_counts_every_row_at_the_budget():
    """Dr. GRPO: Σ values / (rows · L) whatever the lengths, empty rows and splits."""
    rng = np.random.default_rng(5)
    values = rng.normal(size=(8, T)).astype(np.float32)
    mask = masks(rng, batch=8, empty_rows=(2,))
    want = values[mask > 0].sum() / (8 * 32)
    for num_micro in (1, 2, 4):
        sums = counts = 0.0
        for v, m in zip(np.split(values, num_micro), np.split(mask, num_micro)):
            s, c = losses.aggregate(v, m, "constant-norm", 32)
            sums, counts = sums + float(s), counts + float(c)
        assert sums / counts == pytest.approx(want)
    with pytest.raises(ValueError, match=r"`norm_tokens` \(0\) must be >= 1"):
        losses.aggregate(values, mask, "constant-norm")


def test_aggregate_empty_inputs():
    zeros = jnp.zeros((2, 3))
    assert [float(x) for x in losses.aggregate(zeros + 7, zeros, "token-mean")] == [0.0, 0.0]
    assert [float(x) for x in losses.aggregate(zeros + 7, zeros, "seq-mean-token-mean")] == [
        0.0,
        0.0,
    ]
    assert [float(x) for x in losses.aggregate(zeros + 7, zeros, "microbatch-token-mean")] == [
        0.0,
        1.0,
    ]


# ----------------------------------------------------------------------------------------------
# Chunked token log-probs.


def naive_token_logprobs(hidden, lm_head, targets, temperature=1.0):
    logits = jnp.einsum("btd,dv->btv", hidden, lm_head, preferred_element_type=jnp.float32)
    logits = logits / temperature
    logp = jax.nn.log_softmax(logits, axis=-1)
    return jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0], (
        losses.entropy_from_logits(logits)
    )


def logprob_inputs(seed, b=3, t=13, d=8, v=29, dtype=jnp.float32):
    rng = np.random.default_rng(seed)
    hidden = jnp.asarray(rng.normal(size=(b, t, d)), dtype)
    lm_head = jnp.asarray(rng.normal(size=(d, v)) / math.sqrt(d), dtype)
    targets = jnp.asarray(rng.integers(0, v, size=(b, t)), jnp.int32)
    return hidden, lm_head, targets


@pytest.mark.parametrize("chunk_size, temperature", [(4, 1.0), (5, 0.7), (13, 1.0), (64, 1.3)])
def test_token_logprobs_match_reference(chunk_size, temperature):
    hidden, lm_head, targets = logprob_inputs(0)
    logp, entropy = losses.token_logprobs(
        hidden,
        lm_head,
        targets,
        temperature=temperature,
        chunk_size=chunk_size,
        with_entropy=True,
    )
    expected_logp, expected_entropy = ref.token_logprobs(
        np.asarray(hidden), np.asarray(lm_head), np.asarray(targets), temperature
    )
    assert logp.shape == entropy.shape == targets.shape and logp.dtype == jnp.float32
    np.testing.assert_allclose(logp, expected_logp, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(entropy, expected_entropy, rtol=1e-5, atol=1e-5)
    logp_only, none = losses.token_logprobs(
        hidden, lm_head, targets, temperature=temperature, chunk_size=chunk_size
    )
    assert none is None
    # The same computation without the entropy: XLA fuses the two programs differently, which
    # at the suite's LLVM level 0 (tests/helpers/xla_flags.py) parts 1 ulp on some elements
    np.testing.assert_array_max_ulp(np.asarray(logp_only), np.asarray(logp), maxulp=2)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("chunk_size", [4, 64])  # chunked (map + remat) | one chunk (t = 13)
def test_token_logprobs_gradients_equal_naive(dtype, chunk_size):
    hidden, lm_head, targets = logprob_inputs(1, dtype=dtype)
    w = jnp.asarray(np.random.default_rng(2).normal(size=targets.shape), jnp.float32)

    def objective(fn):
        def f(h, head):
            logp, entropy = fn(h, head)
            return jnp.sum(w * logp) + 0.3 * jnp.sum(w * entropy)

        return jax.jit(jax.grad(f, argnums=(0, 1)))

    chunked = objective(
        lambda h, head: losses.token_logprobs(
            h, head, targets, temperature=0.9, chunk_size=chunk_size, with_entropy=True
        )
    )(hidden, lm_head)
    naive = objective(lambda h, head: naive_token_logprobs(h, head, targets, 0.9))(hidden, lm_head)
    tol = 1e-5 if dtype == jnp.float32 else 1e-2
    for got, want in zip(chunked, naive):
        assert got.dtype == dtype
        np.testing.assert_allclose(
            np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=tol, atol=tol
        )
    if dtype == jnp.bfloat16:  # the logits are still float32: values match the f32 maths
        logp, _ = losses.token_logprobs(hidden, lm_head, targets, chunk_size=4)
        expected, _ = ref.token_logprobs(
            np.asarray(hidden, np.float32), np.asarray(lm_head, np.float32), np.asarray(targets)
        )
        np.testing.assert_allclose(logp, expected, rtol=1e-5, atol=1e-5)


def grad_temp_bytes(fn, b, t, d, v):
    """Scratch memory XLA plans for the gradient of sum(logp) + sum(entropy)."""
    shapes = (
        jax.ShapeDtypeStruct((b, t, d), jnp.float32),
        jax.ShapeDtypeStruct((d, v), jnp.float32),
        jax.ShapeDtypeStruct((b, t), jnp.int32),
    )
    loss = lambda h, head, y: sum(jnp.sum(x) for x in fn(h, head, y))
    compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(*shapes).compile()
    return compiled.memory_analysis().temp_size_in_bytes


def test_token_logprobs_never_hold_full_logits():
    b, d, v = 2, 16, 2048
    full_logits_bytes = lambda t: b * t * v * 4
    chunked = lambda h, head, y: losses.token_logprobs(h, head, y, chunk_size=32, with_entropy=True)
    # The measurement does see [B, T, V] logits where they exist.
    assert grad_temp_bytes(naive_token_logprobs, b, 512, d, v) >= full_logits_bytes(512)
    short, long = (grad_temp_bytes(chunked, b, t, d, v) for t in (512, 2048))
    assert long < full_logits_bytes(2048) / 4, long
    # Four times the length costs only the O(T·D) buffers, not more logits.
    assert long - short < full_logits_bytes(2048 - 512) / 8, (short, long)


def test_token_logprobs_validates():
    hidden, lm_head, targets = logprob_inputs(0)
    with pytest.raises(ValueError, match="temperature"):
        losses.token_logprobs(hidden, lm_head, targets, temperature=0.0)
    with pytest.raises(ValueError, match="chunk_size"):
        losses.token_logprobs(hidden, lm_head, targets, chunk_size=0)


def test_k3_gradient_is_finite_for_huge_log_ratios():
    """A padding position with |logp - ref| ~ 100 must not turn the gradient into NaN."""
    import jax

    from tango_jax.rl.losses import KLEstimator, kl_estimate

    logp = jnp.array([[-0.5, -100.0, 100.0]])
    ref = jnp.array([[-0.7, 0.0, 0.0]])
    mask = jnp.array([[1.0, 0.0, 0.0]])
    grad = jax.grad(lambda lp: (kl_estimate(lp, ref, KLEstimator.K3) * mask).sum())(logp)
    assert bool(jnp.all(jnp.isfinite(grad)))
    x = -0.5 + 0.7
    np.testing.assert_allclose(grad[0, 0], 1 - np.exp(-x), rtol=1e-5)
    np.testing.assert_allclose(kl_estimate(logp, ref, "low_var_kl")[0, 1:], [10.0, 10.0])


def test_head_logits_backward_runs_in_the_operands_dtype_against_numpy():
    rng = np.random.default_rng(3)
    h64 = rng.normal(size=(2, 5, 16))
    w64 = rng.normal(size=(16, 40)) * 0.3
    g64 = rng.normal(size=(2, 5, 40))
    # NumPy reference in float64: logits, dh = g wᵀ, dw = hᵀ g
    ref = (h64 @ w64, g64 @ w64.T, np.einsum("bcd,bcv->dv", h64, g64))
    for dtype, tol in ((jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)):
        h, w = jnp.asarray(h64, dtype), jnp.asarray(w64, dtype)
        out, vjp = jax.vjp(losses.head_logits, h, w)
        dh, dw = vjp(jnp.asarray(g64, jnp.float32))
        assert out.dtype == jnp.float32 and dh.dtype == dtype and dw.dtype == dtype
        for got, want in zip((out, dh, dw), ref):
            got = np.asarray(got, np.float64)
            assert np.linalg.norm(got - want) <= tol * np.linalg.norm(want)

    # The speed property: with bf16 operands every matmul of the backward takes bf16 inputs
    # (autodiff of the plain float32-accumulating einsum gave float32 ones: TF32 on GPUs).
    h, w = jnp.asarray(h64, jnp.bfloat16), jnp.asarray(w64, jnp.bfloat16)
    grad = jax.grad(lambda h, w: losses.head_logits(h, w).sum(), argnums=(0, 1))
    dots = [
        tuple(a.dtype.name for a in ops) for ops in dot_operands(jax.make_jaxpr(grad)(h, w).jaxpr)
    ]
    assert len(dots) == 3 and all(d == ("bfloat16", "bfloat16") for d in dots), dots
