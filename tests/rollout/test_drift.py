"""Sampler-vs-trainer log-prob drift metrics against a plain NumPy reference."""

import jax
import numpy as np
import pytest

from tango_jax.rollout.drift import logprob_drift


def reference(q, p, mask, threshold):
    d = (p - q)[mask.astype(bool)].astype(np.float64)
    if d.size == 0:
        return dict(mean=0.0, max=0.0, k3=0.0, frac=0.0, n=0.0)
    return dict(
        mean=np.abs(d).mean(),
        max=np.abs(d).max(),
        k3=np.mean(np.exp(d) - 1 - d),
        frac=np.mean(np.abs(d) > threshold),
        n=float(d.size),
    )


@pytest.mark.parametrize("seed", range(5))
def test_matches_numpy_on_random_batches(seed):
    rng = np.random.default_rng(seed)
    q = -rng.gamma(2.0, 1.0, size=(6, 11)).astype(np.float32)
    p = q + rng.normal(0, 0.3, size=q.shape).astype(np.float32)
    mask = rng.random(q.shape) < 0.7
    got = logprob_drift(q, p, mask, threshold=0.25)
    ref = reference(q, p, mask, 0.25)
    np.testing.assert_allclose(got["rollout/drift_mean_abs"], ref["mean"], rtol=1e-5)
    np.testing.assert_allclose(got["rollout/drift_max_abs"], ref["max"], rtol=1e-6)
    np.testing.assert_allclose(got["rollout/drift_k3_kl"], ref["k3"], rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(got["rollout/drift_frac_above"], ref["frac"], rtol=1e-6)
    assert float(got["rollout/drift_tokens"]) == ref["n"]


def test_identical_logprobs_have_zero_drift_and_padding_is_ignored():
    q = np.array([[-1.0, -2.0, np.nan], [-0.5, np.inf, -np.inf]], np.float32)
    p = np.array([[-1.0, -2.0, 5.0], [-0.5, 0.0, 3.0]], np.float32)
    mask = np.array([[1, 1, 0], [1, 0, 0]])
    got = {k: float(v) for k, v in logprob_drift(q, p, mask).items()}
    assert got == {
        "rollout/drift_mean_abs": 0.0,
        "rollout/drift_max_abs": 0.0,
        "rollout/drift_k3_kl": 0.0,
        "rollout/drift_frac_above": 0.0,
        "rollout/drift_tokens": 3.0,
    }


def test_empty_mask_gives_zeros_not_nan():
    z = np.zeros((2, 3), np.float32)
    got = logprob_drift(z, z + 1.0, np.zeros((2, 3)))
    assert all(float(v) == 0.0 for v in got.values())


def test_hand_worked_values():
    # one token, log p - log q = log 2: k3 = 2 - 1 - log 2
    got = logprob_drift(np.log([[0.25]]), np.log([[0.5]]), np.ones((1, 1)), threshold=0.5)
    assert float(got["rollout/drift_k3_kl"]) == pytest.approx(1 - np.log(2), rel=1e-6)
    assert float(got["rollout/drift_frac_above"]) == 1.0
    assert float(got["rollout/drift_max_abs"]) == pytest.approx(np.log(2), rel=1e-6)


def test_jits():
    q = np.full((2, 4), -1.0, np.float32)
    out = jax.jit(logprob_drift)(q, q - 0.1, np.ones((2, 4), bool))
    assert float(out["rollout/drift_mean_abs"]) == pytest.approx(0.1, rel=1e-5)
