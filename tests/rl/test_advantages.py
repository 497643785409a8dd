"""tango_jax.rl.advantages (the outcome estimators) against the NumPy references and
hand-worked cases."""

import math

import numpy as np
import numpy_reference as ref
import pytest
from advantage_inputs import assert_close, response_masks

from tango_jax.rl import advantages as adv

EPS = 1e-6


# ----------------------------------------------------------------------------------------------
# Outcome advantages.


@pytest.mark.parametrize("group_size", [1, 2, 5])
@pytest.mark.parametrize("seed", [0, 1])
def test_outcome_advantages_match_reference(group_size, seed):
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=4 * group_size).astype(np.float32)
    rewards[: 2 * group_size] = rng.integers(0, 2, size=2 * group_size)  # binary groups too
    mask = response_masks(rng, rewards.size, 9)
    assert_close(
        adv.grpo_outcome_advantages(rewards, group_size),
        ref.grpo_outcome(rewards, group_size),
    )
    assert_close(
        adv.rloo_outcome_advantages(rewards, group_size),
        ref.rloo_outcome(rewards, group_size),
    )
    for baseline in (None, group_size):
        assert_close(
            adv.reinforce_pp_outcome_advantages(rewards, mask, baseline),
            ref.reinforce_pp_outcome(rewards, mask, baseline),
        )


def test_grpo_and_rloo_hand_worked_group():
    rewards = np.array([1.0, 0.0, 0.0, 0.0, 0.0], np.float32)
    # mean 0.2, unbiased std sqrt(0.2)
    expected = np.array([0.8, -0.2, -0.2, -0.2, -0.2]) / (math.sqrt(0.2) + EPS)
    np.testing.assert_allclose(adv.grpo_outcome_advantages(rewards, 5), expected, rtol=1e-6)
    # leave-one-out: 1 - 0 and 0 - 1/4
    np.testing.assert_allclose(
        adv.rloo_outcome_advantages(rewards, 5), [1.0, -0.25, -0.25, -0.25, -0.25], rtol=1e-6
    )


@pytest.mark.parametrize("value", [0.0, 1.0, 1.8, 1.0 / 3.0])
def test_all_equal_rewards_give_exactly_zero(value):
    rewards = np.full(10, value, np.float32)
    mask = response_masks(np.random.default_rng(0), 10, 6)
    assert np.all(np.asarray(adv.grpo_outcome_advantages(rewards, 5)) == 0.0)
    assert np.all(np.asarray(adv.rloo_outcome_advantages(rewards, 5)) == 0.0)
    assert np.all(np.asarray(adv.reinforce_pp_outcome_advantages(rewards, mask)) == 0.0)


def test_group_of_one():
    rewards = np.array([1.0, 0.0, 0.5], np.float32)
    # GRPO: mean 0, std 1; RLOO: nothing to leave out, advantage 0.
    np.testing.assert_allclose(adv.grpo_outcome_advantages(rewards, 1), rewards / (1 + EPS))
    assert np.all(np.asarray(adv.rloo_outcome_advantages(rewards, 1)) == 0.0)


def test_batch_and_no_scaling_hand_worked():
    """Two groups of two: deviations ±0.5 and ±0.25; the batch std of [1, 0, 0.5, 0] is
    sqrt(0.6875 / 3); Dr. GRPO keeps the deviations; a group of one has mean 0."""
    rewards = np.array([1.0, 0.0, 0.5, 0.0], np.float32)
    dev = np.array([0.5, -0.5, 0.25, -0.25])
    none = adv.grpo_outcome_advantages(rewards, 2, scaling=adv.AdvantageScaling.NONE)
    np.testing.assert_allclose(none, dev, rtol=1e-6)
    batch = adv.grpo_outcome_advantages(rewards, 2, scaling=adv.AdvantageScaling.BATCH)
    np.testing.assert_allclose(batch, dev / (math.sqrt(0.6875 / 3) + EPS), rtol=1e-6)
    one = adv.grpo_outcome_advantages(rewards, 1, scaling=adv.AdvantageScaling.NONE)
    np.testing.assert_allclose(one, rewards)


def test_reinforce_pp_weighs_tokens_not_sequences():
    # Two sequences, rewards 1 and 0, lengths 3 and 1: the token-weighted mean is 0.75.
    mask = np.array([[1, 1, 1], [1, 0, 0]], np.float32)
    out = np.asarray(adv.reinforce_pp_outcome_advantages(np.array([1.0, 0.0]), mask))
    std = math.sqrt((3 * 0.25**2 + 0.75**2) / 3)
    np.testing.assert_allclose(out[0], [0.25 / std] * 3, rtol=1e-5)
    np.testing.assert_allclose(out[1], [-0.75 / std, 0, 0], rtol=1e-5)


def test_bad_group_size_is_reported():
    with pytest.raises(ValueError, match=r"batch size \(7\).*group_size` \(5\)"):
        adv.grpo_outcome_advantages(np.zeros(7), 5)


@pytest.mark.parametrize("estimator", list(adv.AdvantageEstimator))
@pytest.mark.parametrize("baseline", [False, True])
def test_outcome_advantages_give_each_estimator_on_tokens(estimator, baseline):
    rng = np.random.default_rng(4)
    mask = response_masks(rng, 10, 8)
    rewards = rng.integers(0, 2, size=10).astype(np.float32)
    options = adv.AdvantageOptions(estimator, reinforce_pp_baseline=baseline)
    got = adv.outcome_advantages(rewards, mask, 5, options)
    expected = {
        adv.AdvantageEstimator.GRPO: ref.grpo_outcome(rewards, 5)[:, None] * mask,
        adv.AdvantageEstimator.RLOO: ref.rloo_outcome(rewards, 5)[:, None] * mask,
        adv.AdvantageEstimator.REINFORCE_PP: ref.reinforce_pp_outcome(
            rewards, mask, 5 if baseline else None
        ),
    }[estimator]
    assert_close(got, expected)
