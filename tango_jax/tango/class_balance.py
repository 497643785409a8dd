"""The verifier's class reweighting: an EMA of correct and incorrect solutions per verifier
batch, and per-sample loss weights that balance the two (host side, once per verifier step).

Official code: `rl_tango_trainer.py` of github.com/kaiwenzha/RL-Tango (TANGO_SPEC.md §3.4).
"""

from __future__ import annotations

import dataclasses
import enum
import math

import numpy as np


class ReweightMethod(enum.Enum):
    SQRT_INVERSE = "sqrt_inverse"  # s± = 1 / (sqrt(ema±) + 1e-6): the script's choice
    INVERSE = "inverse"  # s± = 1 / (ema± + 1e-6): the YAML default


@dataclasses.dataclass(frozen=True)
class ClassBalanceState:
    """EMA of the number of correct (pos) and incorrect (neg) generator solutions per verifier
    batch. Plain floats so a checkpoint can save `to_dict()` as is."""

    pos_ema: float = 0.0
    neg_ema: float = 0.0
    initialized: bool = False

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ClassBalanceState:
        return cls(float(d["pos_ema"]), float(d["neg_ema"]), bool(d["initialized"]))


def _positives(labels_B) -> np.ndarray:
    labels = np.asarray(labels_B, dtype=np.float64).reshape(-1)
    if labels.size == 0:
        raise ValueError("`labels_B` is empty: class reweighting needs at least one sample.")
    return labels > 0.5


def update_class_balance(
    state: ClassBalanceState, labels_B, decay: float = 0.8
) -> ClassBalanceState:
    """One EMA update with this batch's counts; the first batch initialises the EMA.

    `labels_B` [B]: the generator solution's ground-truth correctness per verifier row (> 0.5 is
    positive). `ema ← decay·ema + (1 - decay)·count`.
    """
    if not 0.0 <= decay < 1.0:
        raise ValueError(f"`decay` ({decay}) must be in [0, 1).")
    pos = _positives(labels_B)
    n_pos, n_neg = float(pos.sum()), float(pos.size - pos.sum())
    if not state.initialized:
        return ClassBalanceState(n_pos, n_neg, True)
    return ClassBalanceState(
        decay * state.pos_ema + (1.0 - decay) * n_pos,
        decay * state.neg_ema + (1.0 - decay) * n_neg,
        True,
    )


def class_weights(
    state: ClassBalanceState,
    labels_B,
    method: ReweightMethod | str = ReweightMethod.SQRT_INVERSE,
) -> np.ndarray:
    """Per-sample loss weights s+ (correct solution) or s- (incorrect), mean 1 over the batch.

    [B] -> [B] float32. Call `update_class_balance` with the same batch first (the official
    order). With `sqrt_inverse`, s+/s- = (sqrt(ema-) + 1e-6) / (sqrt(ema+) + 1e-6).
    """
    if not state.initialized:
        raise ValueError(
            "ClassBalanceState is not initialized: call update_class_balance(state, labels_B) "
            "before class_weights."
        )
    method = ReweightMethod(method)
    pos = _positives(labels_B)
    f = math.sqrt if method is ReweightMethod.SQRT_INVERSE else float
    pos_coef = 1.0 / (f(state.pos_ema) + 1e-6)
    neg_coef = 1.0 / (f(state.neg_ema) + 1e-6)
    coefs = np.where(pos, pos_coef, neg_coef)
    return (coefs * (coefs.size / coefs.sum())).astype(np.float32)
