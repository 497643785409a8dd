"""tango_jax.tango.class_balance (the verifier's class reweighting) against the NumPy
reference and hand-worked cases."""

import math

import numpy as np
import numpy_reference as ref
import pytest

from tango_jax.tango import class_balance as cb


@pytest.mark.parametrize("method", ["sqrt_inverse", "inverse"])
def test_class_weights_match_reference(method):
    rng = np.random.default_rng(7)
    batches = [rng.random(20) < p for p in (0.2, 0.35, 0.6)]
    state = cb.ClassBalanceState()
    for labels in batches:
        state = cb.update_class_balance(state, labels.astype(np.float32))
    weights = cb.class_weights(state, batches[-1].astype(np.float32), method)
    expected, pos_ema, neg_ema = ref.class_weights_over_batches(batches, method=method)
    assert (state.pos_ema, state.neg_ema) == pytest.approx((pos_ema, neg_ema), rel=1e-12)
    np.testing.assert_allclose(weights, expected, rtol=1e-6)
    assert weights.mean() == pytest.approx(1.0, rel=1e-6)


def test_class_weight_ratio_is_sqrt_of_inverse_ema_ratio():
    state = cb.update_class_balance(cb.ClassBalanceState(), np.r_[np.ones(30), np.zeros(70)])
    assert (state.pos_ema, state.neg_ema, state.initialized) == (30.0, 70.0, True)
    state = cb.update_class_balance(state, np.r_[np.ones(50), np.zeros(50)])
    assert (state.pos_ema, state.neg_ema) == pytest.approx((34.0, 66.0))
    labels = np.array([1.0, 0.0, 0.0, 0.9, 0.2])  # > 0.5 is correct
    w = cb.class_weights(state, labels)
    assert w[0] / w[1] == pytest.approx(math.sqrt(66.0 / 34.0), rel=1e-6)
    assert w[3] == w[0] and w[4] == w[1]
    assert w.mean() == pytest.approx(1.0)


def test_class_balance_state_roundtrip_and_errors():
    state = cb.update_class_balance(cb.ClassBalanceState(), [1.0, 0.0, 0.0])
    assert cb.ClassBalanceState.from_dict(state.to_dict()) == state
    with pytest.raises(ValueError, match="not initialized"):
        cb.class_weights(cb.ClassBalanceState(), [1.0])
    with pytest.raises(ValueError, match="decay"):
        cb.update_class_balance(state, [1.0], decay=1.0)
    with pytest.raises(ValueError, match="empty"):
        cb.update_class_balance(state, [])
