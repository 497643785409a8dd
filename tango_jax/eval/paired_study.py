"""Statistics of a paired multi-seed study: curve summaries, paired t-intervals, Holm correction.

Each arm of a study is run once per seed from the same SFT checkpoints, prompt stream and
evaluation samples, so arm A and arm B on seed s form a pair. The planned contrasts are
differences A - B of a per-run summary (for the generator: the area under its held-out accuracy
curve against generator updates), summarised by the mean paired difference, its 95%
t-interval and a two-sided p-value, with Holm's step-down correction over the contrasts.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

import numpy as np
from scipy import stats


def area_under_curve(curve: Sequence[Sequence[float]]) -> float:
    """Mean height of a curve [[x, y], ...] (x increasing) by the trapezoid rule: the area under
    it divided by its x-range, so it is on the accuracy scale. One point: its y."""
    xy = np.asarray(curve, float)
    if xy.ndim != 2 or xy.shape[1] != 2 or xy.shape[0] == 0:
        raise ValueError(f"curve must be a non-empty list of [x, y] pairs; got shape {xy.shape}.")
    if xy.shape[0] == 1:
        return float(xy[0, 1])
    x, y = xy[:, 0], xy[:, 1]
    if np.any(np.diff(x) <= 0):
        raise ValueError(f"curve x values must increase; got {x.tolist()}.")
    return float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(x)) / (x[-1] - x[0]))


def steps_to_reach(curve: Sequence[Sequence[float]], target: float) -> float:
    """The first x at which the curve reaches `target` (linear between evaluations), or NaN
    when it never does."""
    xy = np.asarray(curve, float)
    for (x0, y0), (x1, y1) in itertools.pairwise(xy):
        if y0 >= target:
            return float(x0)
        if y1 >= target:
            return float(x0 + (target - y0) / (y1 - y0) * (x1 - x0))
    return float(xy[-1, 0]) if xy[-1, 1] >= target else float("nan")


@dataclasses.dataclass(frozen=True)
class Contrast:
    """A paired difference over seeds: mean, 95% t-interval half-width, p-value (two-sided,
    one-sample t-test of the differences against 0) and Holm-adjusted p-value."""

    name: str
    diffs: tuple[float, ...]
    mean: float
    half: float
    p: float
    p_holm: float = float("nan")

    @property
    def n(self) -> int:
        return len(self.diffs)


def t_half_width(x: np.ndarray) -> float:
    """Half-width of the two-sided 95% Student t-interval of the mean of `x` (>= 2 values)."""
    return float(stats.t.ppf(0.975, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size))


def mean_ci(values) -> tuple[float, float]:
    """(mean, half-width of its 95% t-interval) of the values that are not NaN; the half-width
    is NaN for fewer than two."""
    x = np.asarray([v for v in values if not np.isnan(v)], dtype=float)
    if x.size == 0:
        return float("nan"), float("nan")
    if x.size == 1:
        return float(x[0]), float("nan")
    return float(x.mean()), t_half_width(x)


def paired(name: str, a: dict[int, float], b: dict[int, float]) -> Contrast:
    """A - B over the seeds both have (NaN half-width and p with fewer than two)."""
    seeds = sorted(a.keys() & b.keys())
    d = np.asarray([a[s] - b[s] for s in seeds], float)
    if d.size < 2:
        mean = float(d.mean()) if d.size else float("nan")
        return Contrast(name, tuple(d.tolist()), mean, float("nan"), float("nan"))
    sd = d.std(ddof=1)
    half = t_half_width(d)
    if sd == 0:
        p = 1.0 if d.mean() == 0 else 0.0
    else:
        p = float(2 * stats.t.sf(abs(d.mean()) / (sd / np.sqrt(d.size)), d.size - 1))
    return Contrast(name, tuple(d.tolist()), float(d.mean()), half, p)


def holm(contrasts: Sequence[Contrast]) -> list[Contrast]:
    """Holm's step-down adjusted p-values (monotone, capped at 1), in the input order; a
    contrast without a p-value keeps NaN and does not count toward m."""
    tested = [i for i, c in enumerate(contrasts) if not np.isnan(c.p)]
    order = sorted(tested, key=lambda i: contrasts[i].p)
    adjusted, running = {}, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * contrasts[i].p))
        adjusted[i] = running
    return [
        dataclasses.replace(c, p_holm=adjusted.get(i, float("nan")))
        for i, c in enumerate(contrasts)
    ]
