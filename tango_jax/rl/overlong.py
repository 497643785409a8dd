"""DAPO's soft overlong punishment: a length penalty added to a completion's reward.

Yu et al. 2025, "DAPO", arXiv 2503.14476, Sec. 3.4, Eq. 13. With the generation budget
L_max (`max_tokens`) and a buffer L_cache before it, a completion of |y| tokens gets

    0                                   |y| <= L_max - L_cache
    ((L_max - L_cache) - |y|) / L_cache L_max - L_cache < |y| <= L_max
    -1                                  |y| > L_max

times `penalty` (1 in the paper), so the penalty grows linearly from 0 at the buffer's start
to -penalty at the budget, where the sampler cuts the completion. Host-side NumPy, like the
rewards it is added to.
"""

from __future__ import annotations

import numpy as np


def overlong_penalty(
    lengths_B: np.ndarray, max_tokens: int, buffer: int, penalty: float = 1.0
) -> np.ndarray:
    """The (<= 0) reward term of each completion from its token count: int [B] -> float32 [B].

    `buffer` = L_cache in [1, max_tokens]; `penalty` >= 0 scales it.
    """
    if not 1 <= buffer <= max_tokens:
        raise ValueError(
            f"`buffer` ({buffer}) must be in [1, max_tokens ({max_tokens})]: the soft penalty "
            "ramps up over the last `buffer` tokens of the budget."
        )
    lengths = np.asarray(lengths_B, np.float64)
    start = max_tokens - buffer
    ramp = np.clip((start - lengths) / buffer, -1.0, 0.0)  # 0 before the buffer, -1 past L_max
    return (penalty * ramp).astype(np.float32)
