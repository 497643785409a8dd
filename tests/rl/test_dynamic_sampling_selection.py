"""DAPO's dynamic sampling, the batch-filling rule (rl/dynamic_sampling.py), on hand-worked
rounds: which groups are kept, in what order, and what tops up a batch the rounds cannot fill."""

import numpy as np
import pytest

from tango_jax.rl.dynamic_sampling import Selection, enough, select_groups, zero_variance


def test_zero_variance_flags_groups_whose_rewards_are_all_equal():
    rewards = np.array(
        [
            [1.0, 1.0, 1.0],  # all right
            [0.0, 0.0, 0.0],  # all wrong
            [1.0, 0.0, 1.0],
            [0.5, 0.5, 0.5 + 1e-12],  # equal within the tolerance
            [-0.25, 1.0, 1.0],  # an overlong penalty makes them differ
        ]
    )
    np.testing.assert_array_equal(zero_variance(rewards), [True, True, False, True, False])
    with pytest.raises(ValueError, match="groups, samples per group"):
        zero_variance(np.zeros(4))


# Four groups a round (data.prompts_per_step = 4), n = 2 samples each. Z: equal rewards.
ROUND0 = np.array([[1, 1], [1, 0], [0, 1], [0, 0]], float)  # Z K K Z
ROUND1 = np.array([[1, 1], [0, 1], [1, 0], [1, 1]], float)  # Z K K Z
ROUND2 = np.array([[1, 0], [0, 0], [0, 1], [1, 0]], float)  # K Z K K


def test_the_first_kept_groups_fill_the_batch_in_consumption_order():
    """Round 0 keeps 2 of 4, round 1 brings 2 more: the batch is full after round 1, with
    round 0's groups 1, 2 and round 1's groups 1, 2; round 2 is never sampled."""
    z = [zero_variance(ROUND0), zero_variance(ROUND1)]
    assert not enough(z[:1], 4) and enough(z, 4)
    assert select_groups(z, 4) == Selection(((0, 1), (0, 2), (1, 1), (1, 2)), padded=0)


def test_surplus_kept_groups_are_trimmed_and_the_rest_thrown_away():
    """Rounds 0 and 2: 2 + 3 kept groups for a batch of 4: round 2's last one goes (veRL's
    `batch[:traj_bsz]`)."""
    z = [zero_variance(ROUND0), zero_variance(ROUND2)]
    assert select_groups(z, 4) == Selection(((0, 1), (0, 2), (1, 0), (1, 2)), padded=0)


def test_a_full_first_round_is_the_batch_itself():
    z = [np.zeros(4, bool)]
    assert enough(z, 4)
    assert select_groups(z, 4) == Selection(((0, 0), (0, 1), (0, 2), (0, 3)), padded=0)


def test_at_the_round_cap_the_earliest_equal_reward_groups_top_up_the_batch():
    """Only 1 kept group in two rounds of 4 (the cap): the batch of 4 is topped up with the
    first three equal-reward groups in consumption order (round 0's 0, 1 and 3), and the
    groups come out in consumption order, not kept-first."""
    z = [np.array([True, True, False, True]), np.array([True, True, True, True])]
    assert select_groups(z, 4) == Selection(((0, 0), (0, 1), (0, 2), (0, 3)), padded=3)
    # nothing kept at all: round 0 again, every group padding
    z = [np.ones(2, bool), np.ones(2, bool)]
    assert select_groups(z, 2) == Selection(((0, 0), (0, 1)), padded=2)
    # padding from a later round, after the kept ones of both
    z = [np.array([False, True]), np.array([True, False]), np.array([True, True])]
    assert select_groups(z, 3) == Selection(((0, 0), (0, 1), (1, 1)), padded=1)


def test_select_groups_refuses_a_target_the_rounds_cannot_hold():
    with pytest.raises(ValueError, match="fewer than the batch's 5"):
        select_groups([np.zeros(4, bool)], 5)
    with pytest.raises(ValueError, match="target"):
        select_groups([np.zeros(4, bool)], 0)
