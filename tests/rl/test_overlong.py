"""DAPO's soft overlong penalty: hand-worked cases and TRL's `get_soft_overlong_punishment`."""

import numpy as np
import pytest

from tango_jax.rl.overlong import overlong_penalty


def test_hand_worked_ramp():
    """Budget 100, buffer 20: 0 up to 80 tokens, then -1/20 per token, -1 at 100."""
    lengths = [0, 50, 80, 81, 90, 99, 100]
    want = [0.0, 0.0, 0.0, -0.05, -0.5, -0.95, -1.0]
    np.testing.assert_allclose(overlong_penalty(lengths, 100, 20), want, rtol=1e-6)
    np.testing.assert_allclose(overlong_penalty(lengths, 100, 20, 0.5), np.multiply(want, 0.5))
    # A buffer of the whole budget ramps from the first token; one of 1 hits only the cut.
    np.testing.assert_allclose(overlong_penalty([0, 25, 100], 100, 100), [0.0, -0.25, -1.0])
    np.testing.assert_allclose(overlong_penalty([98, 99, 100], 100, 1), [0.0, 0.0, -1.0])


def test_bad_buffer_is_named():
    with pytest.raises(ValueError, match=r"`buffer` \(0\) must be in \[1, max_tokens \(100\)\]"):
        overlong_penalty([10], 100, 0)


def test_equals_trl():
    rewards = pytest.importorskip("trl.rewards")
    lengths = [*range(0, 101, 7), 100]
    trl = rewards.get_soft_overlong_punishment(max_completion_len=100, soft_punish_cache=20)
    want = trl([[1] * n for n in lengths])
    np.testing.assert_allclose(overlong_penalty(lengths, 100, 20), want, rtol=1e-6)
