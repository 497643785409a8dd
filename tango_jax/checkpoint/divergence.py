"""Signs that a training step destroyed a model although its numbers are finite.

    signs = divergence_signs(metrics, role="generator", prev_param_norm=n0, vocab_size=V,
                             cfg=run_config.divergence)

A learning rate far too high can wreck a model in one update without any NaN: with lr = 1e6 on
the tiny config, the first generator update took the weights from max |w| ≈ 1.08 to ≈ 1e10, the
output became uniform (entropy = ln V) and the gradients vanished (grad_norm 0), and the run
went on for three more steps, checkpointing the wrecked weights as "good". Two cheap checks
catch it at the step it happens, from metrics every step already logs:

    parameter norm jump    ‖θ_t‖ / ‖θ_{t-1}‖ > max_param_norm_ratio (AdamW moves each weight by
                           about lr per step: a healthy run's norm changes by far less than 1%)
    uniform output         mean token entropy >= max_entropy_frac · ln V (needs an entropy
                           metric: loss.entropy_coef != 0); off by default, since a model
                           straight from random initialisation (no SFT) is near-uniform too

`action` says what a sign does: stop the run (before the step is checkpointed, so the last
checkpoint stays the last good one), warn, or nothing. Non-finite metrics always stop the run
(`checkpoint.check_finite`).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping

from tango_jax.schema import check_fields, within


class GuardAction(enum.Enum):
    STOP = "stop"  # raise DivergenceError before the step is checkpointed
    WARN = "warn"  # log a warning and go on
    OFF = "off"  # no check


@dataclasses.dataclass(frozen=True)
class DivergenceConfig:
    action: GuardAction = GuardAction.STOP  # stop | warn | off
    # Stop when one update multiplies a role's parameter norm by more than this (0: off).
    max_param_norm_ratio: float = 2.0
    # Stop when the mean token entropy reaches this fraction of ln(vocab) (0: off).
    max_entropy_frac: float = 0.0

    def __post_init__(self):
        check_fields(
            self,
            {
                "max_param_norm_ratio": within(
                    0.0, math.inf, open_hi=True, why=" (0 turns the check off; > 1 otherwise)"
                ),
                "max_entropy_frac": within(0.0, 1.0, why=" (0 turns the check off)"),
            },
        )


class DivergenceError(RuntimeError):
    """A training step showed a sign of divergence and `action` is stop."""


def divergence_signs(
    metrics: Mapping[str, float],
    *,
    role: str,
    prev_param_norm: float | None,
    vocab_size: int,
    cfg: DivergenceConfig,
) -> list[str]:
    """What in `metrics` (a step's `<role>/train/...` metrics, full names) looks diverged; one
    phrase per sign, empty when healthy. `prev_param_norm`: the norm before this update (None:
    unknown, the check is skipped)."""
    if cfg.action is GuardAction.OFF:
        return []
    signs = []
    norm = metrics.get(f"{role}/train/param_norm")
    ratio = cfg.max_param_norm_ratio
    if ratio and norm is not None and prev_param_norm and norm / prev_param_norm > ratio:
        signs.append(
            f"the parameter norm jumped from {prev_param_norm:.4g} to {norm:.4g} in one update "
            f"(x{norm / prev_param_norm:.3g} > divergence.max_param_norm_ratio {ratio})"
        )
    entropy = metrics.get(f"{role}/train/loss/entropy")
    frac = cfg.max_entropy_frac
    if frac and entropy is not None and entropy >= frac * math.log(vocab_size):
        signs.append(
            f"the mean token entropy {entropy:.4g} is {entropy / math.log(vocab_size):.3f} of its "
            f"maximum ln({vocab_size}) (>= divergence.max_entropy_frac {frac}): near-uniform "
            "output"
        )
    return signs
