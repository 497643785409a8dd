"""What the steps hand the trainer from a rollout: the truncation flag and the soft overlong
penalty (issue 49), on a stand-in role (no model)."""

import types

import numpy as np

from tango_jax.config.roles import RoleConfig, RolloutSettings
from tango_jax.rollout.base import Completion, FinishReason, Prompt
from tango_jax.run import steps


def _completion(n, reason):
    return Completion(tuple(range(2, 2 + n)), "", (-0.5,) * n, reason, 0)


def _role(**rollout):
    config = RoleConfig(rollout=RolloutSettings(max_tokens=10, **rollout))
    model = types.SimpleNamespace(config=types.SimpleNamespace(pad_token_id=0))
    return types.SimpleNamespace(name="generator", config=config, model=model)


COMPLETIONS = [
    _completion(10, FinishReason.LENGTH),
    _completion(4, FinishReason.STOP),
    _completion(9, FinishReason.STOP),
]


def test_batch_flags_the_completions_cut_at_max_tokens():
    prompts = [Prompt((5, 6), "")] * 3
    batch = steps._batch(_role(), prompts, COMPLETIONS)
    np.testing.assert_array_equal(batch.truncated, [1.0, 0.0, 0.0])


def test_overlong_penalty_is_added_only_when_a_buffer_is_set():
    rewards = np.array([1.0, 0.0, 1.0], np.float32)
    same, metrics = steps._with_overlong_penalty(_role(), rewards, COMPLETIONS)
    assert same is rewards and metrics == {}
    # budget 10, buffer 4: 0 up to 6 tokens, -1/4 per token after, times the penalty 0.5
    shaped, metrics = steps._with_overlong_penalty(
        _role(overlong_buffer=4, overlong_penalty=0.5), rewards, COMPLETIONS
    )
    np.testing.assert_allclose(shaped, [0.5, 0.0, 1.0 - 0.375])
    assert metrics.keys() == {"generator/overlong_penalty/mean"}
    assert np.isclose(metrics["generator/overlong_penalty/mean"], -0.875 / 3)
