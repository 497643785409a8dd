"""The paired-study statistics against hand-worked values and SciPy's own tests."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tango_jax import paired_study as ps


def test_area_under_curve_by_hand():
    # trapezoids: (0.2+0.4)/2*6 + (0.4+0.4)/2*6 = 1.8 + 2.4 = 4.2 over x-range 12
    assert ps.area_under_curve([[0, 0.2], [6, 0.4], [12, 0.4]]) == pytest.approx(0.35)
    assert ps.area_under_curve([[0, 0.3]]) == 0.3
    with pytest.raises(ValueError, match="increase"):
        ps.area_under_curve([[0, 0.1], [0, 0.2]])
    with pytest.raises(ValueError, match="non-empty"):
        ps.area_under_curve([])


def test_steps_to_reach_by_hand():
    curve = [[0, 0.2], [6, 0.4], [12, 0.5]]
    assert ps.steps_to_reach(curve, 0.3) == pytest.approx(3.0)
    assert ps.steps_to_reach(curve, 0.2) == 0.0
    assert ps.steps_to_reach(curve, 0.5) == pytest.approx(12.0)
    assert np.isnan(ps.steps_to_reach(curve, 0.6))


def test_paired_matches_scipy():
    rng = np.random.default_rng(0)
    a = {s: float(v) for s, v in enumerate(rng.normal(0.5, 0.1, 7), 1)}
    b = {s: float(v) for s, v in enumerate(rng.normal(0.45, 0.1, 7), 1)}
    b[99] = 1.0  # unpaired: ignored
    c = ps.paired("a - b", a, b)
    d = np.array([a[s] - b[s] for s in range(1, 8)])
    ref = stats.ttest_rel([a[s] for s in range(1, 8)], [b[s] for s in range(1, 8)])
    assert c.n == 7 and c.mean == pytest.approx(d.mean())
    assert c.p == pytest.approx(ref.pvalue)
    lo, hi = stats.t.interval(0.95, 6, loc=d.mean(), scale=stats.sem(d))
    assert c.half == pytest.approx((hi - lo) / 2)
    assert np.isnan(ps.paired("x", {1: 0.1}, {1: 0.2}).half)


def test_holm_by_hand():
    cs = [ps.Contrast(n, (), 0.0, 0.0, p) for n, p in (("a", 0.01), ("b", 0.04), ("c", 0.03))]
    cs.append(ps.Contrast("d", (), 0.0, float("nan"), float("nan")))
    out = ps.holm(cs)
    # sorted p 0.01, 0.03, 0.04 -> 3*0.01, 2*0.03, max(0.06, 1*0.04)
    assert [c.p_holm for c in out[:3]] == pytest.approx([0.03, 0.06, 0.06])
    assert np.isnan(out[3].p_holm)
