"""Random and hand-made inputs shared by the advantage tests."""

import numpy as np


def assert_close(got, want, tol=1e-5):
    np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol)


def response_masks(rng, batch, length, min_len=1):
    lengths = rng.integers(min_len, length + 1, size=batch)
    return (np.arange(length)[None, :] < lengths[:, None]).astype(np.float32)


def random_steps(rng, mask, nv, no_step_rows=()):
    """±1/K at K random distinct positions inside each response, per verifier sample."""
    b, t = mask.shape
    rewards = np.zeros((b, nv, t), np.float32)
    step_mask = np.zeros((b, nv, t), np.float32)
    for i in range(b):
        if i in no_step_rows:
            continue
        length = int(mask[i].sum())
        k = int(rng.integers(1, min(length, 4) + 1))
        for v in range(nv):
            if rng.random() < 0.2:  # this verification failed to parse: no step rewards
                continue
            positions = rng.choice(length, size=k, replace=False)
            step_mask[i, v, positions] = 1.0
            rewards[i, v, positions] = rng.choice([-1.0, 1.0], size=k) / k
    return rewards, step_mask
