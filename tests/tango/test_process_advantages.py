"""tango_jax.tango.process_advantages (step advantages, the α schedule and the blend) against
the NumPy references and hand-worked cases."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import numpy_reference as ref
import pytest
from advantage_inputs import assert_close, random_steps, response_masks

from tango_jax.rl import advantages as adv
from tango_jax.tango import process_advantages as pa

EPS = 1e-6


# ----------------------------------------------------------------------------------------------
# Step advantages.


@pytest.mark.parametrize("nv", [1, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_step_advantages_match_reference(nv, seed):
    rng = np.random.default_rng(seed)
    g, b, t = 5, 15, 11
    mask = response_masks(rng, b, t, min_len=2)
    rewards, step_mask = random_steps(rng, mask, nv, no_step_rows={3, 7})
    step_mask[10:15] = 0.0  # a whole group without step rewards
    rewards[10:15] = 0.0
    step_mask[5:10] = 0.0  # a group with a single step reward (mean 0, std 1)
    rewards[5:10] = 0.0
    step_mask[6, 0, 1], rewards[6, 0, 1] = 1.0, -1.0
    assert_close(
        pa.grpo_step_advantages(rewards, step_mask, mask, g),
        ref.grpo_step(rewards, step_mask, g),
    )
    assert_close(
        pa.rloo_step_advantages(rewards, step_mask, mask, g),
        ref.rloo_step(rewards, step_mask, g),
    )
    assert_close(
        pa.reinforce_pp_step_advantages(rewards, step_mask, mask),
        ref.reinforce_pp_step(rewards, step_mask, mask),
    )


def one_sample(rows_of_steps, t=8):
    """[(position, reward), ...] per response -> rewards, step mask [B, 1, T], full mask."""
    rewards = np.zeros((len(rows_of_steps), 1, t), np.float32)
    step_mask = np.zeros_like(rewards)
    for i, steps in enumerate(rows_of_steps):
        for pos, r in steps:
            rewards[i, 0, pos], step_mask[i, 0, pos] = r, 1.0
    return rewards, step_mask, np.ones((len(rows_of_steps), t), np.float32)


def test_grpo_step_hand_worked():
    # Response 0: two steps (+1/2 at t=2, -1/2 at t=5); response 1: one step (+1 at t=3).
    # Values {0.5, -0.5, 1}: mean 1/3, unbiased std sqrt(21)/6.
    r, sm, m = one_sample([[(2, 0.5), (5, -0.5)], [(3, 1.0)]])
    s = math.sqrt(21) / 6 + EPS
    z0, z1, z2 = (0.5 - 1 / 3) / s, (-0.5 - 1 / 3) / s, (1.0 - 1 / 3) / s
    expected = np.array([[z0 + z1] * 3 + [z1] * 3 + [0, 0], [z2] * 4 + [0] * 4])
    np.testing.assert_allclose(pa.grpo_step_advantages(r, sm, m, 2), expected, rtol=1e-5)
    # RLOO: n/(n-1)·(r - mean) = 1.5·(r - 1/3), times the official ×10.
    y0, y1, y2 = 1.5 * (0.5 - 1 / 3), 1.5 * (-0.5 - 1 / 3), 1.5 * (1.0 - 1 / 3)
    expected = 10 * np.array([[y0 + y1] * 3 + [y1] * 3 + [0, 0], [y2] * 4 + [0] * 4])
    np.testing.assert_allclose(pa.rloo_step_advantages(r, sm, m, 2), expected, rtol=1e-5)
    np.testing.assert_allclose(
        pa.rloo_step_advantages(r, sm, m, 2, step_scale=1.0), expected / 10, rtol=1e-5
    )


def test_all_correct_steps_with_different_counts_favour_fewer_steps():
    # TANGO_SPEC §10.5: every step judged correct, K = 1 vs K = 2: values {1, 1/2, 1/2}.
    r, sm, m = one_sample([[(1, 1.0)], [(1, 0.5), (3, 0.5)]])
    out = np.asarray(pa.grpo_step_advantages(r, sm, m, 2))
    assert out[0, 0] > 0 > out[1, 0]


@pytest.mark.parametrize("value", [1.0 / 3.0, -0.25, 1.0])
def test_all_equal_step_rewards_give_exactly_zero(value):
    r, sm, m = one_sample([[(1, value), (4, value)], [(2, value), (6, value), (7, value)]])
    assert np.all(np.asarray(pa.grpo_step_advantages(r, sm, m, 2)) == 0.0)
    assert np.all(np.asarray(pa.rloo_step_advantages(r, sm, m, 2)) == 0.0)


def test_no_step_rewards_anywhere_gives_zero_step_advantage():
    mask = response_masks(np.random.default_rng(0), 6, 7)
    zeros = np.zeros((6, 2, 7), np.float32)
    for out in (
        pa.grpo_step_advantages(zeros, zeros, mask, 3),
        pa.rloo_step_advantages(zeros, zeros, mask, 3),
        pa.reinforce_pp_step_advantages(zeros, zeros, mask),
    ):
        assert np.all(np.asarray(out) == 0.0)


def test_a_response_without_steps_gets_zero():
    r, sm, m = one_sample([[(2, 1.0), (5, -1.0)], [], [(1, -1.0)]])
    for out in (pa.grpo_step_advantages(r, sm, m, 3), pa.rloo_step_advantages(r, sm, m, 3)):
        out = np.asarray(out)
        assert np.all(out[1] == 0.0) and np.any(out[0] != 0.0) and np.any(out[2] != 0.0)
    # REINFORCE++ whitens over the batch, so a response without steps gets -mean/std.
    out = np.asarray(pa.reinforce_pp_step_advantages(r, sm, m))
    assert np.all(out[1] == out[1, 0]) and out[1, 0] != 0.0


def test_step_advantage_is_averaged_over_verifier_samples():
    # Two verifications of each response; the second found no steps for response 0.
    r = np.zeros((2, 2, 4), np.float32)
    sm = np.zeros_like(r)
    r[0, 0, 1], r[1, 0, 2], r[1, 1, 2] = 1.0, -1.0, 1.0
    sm[0, 0, 1] = sm[1, 0, 2] = sm[1, 1, 2] = 1.0
    m = np.ones((2, 4), np.float32)
    s = math.sqrt(sum((v - 1 / 3) ** 2 for v in (1, -1, 1)) / 2) + EPS  # values {1, -1, 1}
    z_pos, z_neg = (1 - 1 / 3) / s, (-1 - 1 / 3) / s
    expected = np.array([[z_pos / 2] * 2 + [0, 0], [(z_neg + z_pos) / 2] * 3 + [0]])
    np.testing.assert_allclose(pa.grpo_step_advantages(r, sm, m, 2), expected, rtol=1e-5)


def test_steps_outside_the_response_are_ignored():
    r, sm, m = one_sample([[(2, 1.0)], [(3, -1.0)]])
    r2, sm2 = r.copy(), sm.copy()
    r2[0, 0, 7], sm2[0, 0, 7] = 5.0, 1.0
    m[0, 6:] = 0.0
    np.testing.assert_array_equal(
        pa.grpo_step_advantages(r, sm, m, 2), pa.grpo_step_advantages(r2, sm2, m, 2)
    )


def test_step_advantages_jit():
    rng = np.random.default_rng(3)
    mask = response_masks(rng, 10, 9, min_len=2)
    r, sm = random_steps(rng, mask, 2)
    fn = jax.jit(pa.grpo_step_advantages, static_argnames=("group_size", "eps"))
    np.testing.assert_allclose(
        fn(r, sm, mask, group_size=5), pa.grpo_step_advantages(r, sm, mask, 5), rtol=1e-6
    )


# ----------------------------------------------------------------------------------------------
# Blending, α schedules and the combined call.


def test_blend_always_scales_outcome():
    a_out = jnp.array([[1.0, 2.0], [3.0, 0.0]])

    def blend(a_step, alpha):  # paper Eq. 7 with the schedule's weights (1 - α, α) at t = 0
        return pa.combine_advantages(a_out, a_step, *pa.AlphaSchedule(alpha0=alpha).weights(0))

    np.testing.assert_allclose(blend(jnp.zeros_like(a_out), 0.1), 0.9 * np.asarray(a_out))
    np.testing.assert_allclose(blend(jnp.ones_like(a_out), 0.25), 0.75 * np.asarray(a_out) + 0.25)
    np.testing.assert_allclose(
        pa.combine_advantages(a_out, jnp.ones_like(a_out), 1.0, 2.0), np.asarray(a_out) + 2.0
    )


@pytest.mark.parametrize(
    "total, table",
    [
        (300, {0: 0.1, 25: 0.068, 50: 0.046, 100: 0.022, 150: 0.010, 200: 0.0046, 300: 0.001}),
        (200, {0: 0.1, 50: 0.032, 100: 0.010, 200: 0.001}),
    ],
)
def test_exponential_alpha_matches_spec_table(total, table):
    schedule = pa.AlphaSchedule(pa.AlphaScheduleKind.EXPONENTIAL, total_steps=total)
    for t, expected in table.items():  # the table gives two significant digits
        assert f"{schedule(t):.2g}" == f"{expected:.2g}", t
    assert schedule(total) == pytest.approx(1e-3, rel=1e-9)
    assert schedule(10 * total) == 1e-3  # floored
    assert schedule(-1) == 0.0  # generator warm-up
    assert schedule.weights(100) == (1 - schedule(100), schedule(100))


@pytest.mark.parametrize("kind", ["exp", "linear", "cosine"])
def test_alpha_schedules_match_reference(kind):
    schedule = pa.AlphaSchedule(kind, total_steps=150, alpha0=0.5, alpha_min=2e-3)
    for t in [-3, 0, 1, 17, 75, 149, 150]:
        expected = ref.alpha(t, kind, 0.5, 2e-3, 150)
        assert schedule(t) == pytest.approx(expected, rel=1e-12, abs=1e-15), t
    assert schedule(400) == pytest.approx(2e-3)  # linear floors, cosine is clamped at T


def test_alpha_none_has_fixed_weights():
    schedule = pa.AlphaSchedule("none", outcome_weight=1.0, process_weight=0.3)
    assert schedule.weights(12) == (1.0, 0.3)
    with pytest.raises(ValueError, match="weights"):
        schedule(12)


def test_alpha_schedule_validates():
    with pytest.raises(ValueError, match="alpha_min"):
        pa.AlphaSchedule(alpha0=1e-4, alpha_min=1e-3)
    with pytest.raises(ValueError, match="total_steps"):
        pa.AlphaSchedule(total_steps=0)


@pytest.mark.parametrize("estimator", list(adv.AdvantageEstimator))
def test_blended_advantages_composes_the_pieces(estimator):
    rng = np.random.default_rng(5)
    mask = response_masks(rng, 10, 8, min_len=2)
    rewards = rng.integers(0, 2, size=10).astype(np.float32)
    r, sm = random_steps(rng, mask, 1)
    options = adv.AdvantageOptions(estimator)
    a, a_out, a_step = pa.blended_advantages(rewards, mask, 5, options, (0.9, 0.1), r, sm)
    outcome, step = {
        adv.AdvantageEstimator.GRPO: (
            ref.grpo_outcome(rewards, 5)[:, None] * mask,
            ref.grpo_step(r, sm, 5),
        ),
        adv.AdvantageEstimator.RLOO: (
            ref.rloo_outcome(rewards, 5)[:, None] * mask,
            ref.rloo_step(r, sm, 5),
        ),
        adv.AdvantageEstimator.REINFORCE_PP: (
            ref.reinforce_pp_outcome(rewards, mask),
            ref.reinforce_pp_step(r, sm, mask),
        ),
    }[estimator]
    assert_close(a_out, 0.9 * outcome)
    assert_close(a_step, 0.1 * step)
    assert_close(a, 0.9 * outcome + 0.1 * step)
    # Without step rewards (or with none in the batch): (1 - α)·A_out.
    a_none, _, _ = pa.blended_advantages(rewards, mask, 5, options, (0.9, 0.1))
    a_zero, _, _ = pa.blended_advantages(
        rewards, mask, 5, options, (0.9, 0.1), np.zeros_like(r), np.zeros_like(sm)
    )
    assert_close(a_none, 0.9 * outcome)
    assert_close(a_zero, 0.9 * outcome)
