"""What the steps hand the trainer from a rollout: the truncation flag and the soft overlong
penalty (issue 49), on a stand-in role (no model; run/update_batch.py)."""

import types

import numpy as np

from tango_jax.config.roles import RoleConfig, RolloutSettings
from tango_jax.config.run import AlgorithmConfig
from tango_jax.data.datasets import Problem
from tango_jax.rollout.base import Completion, FinishReason, Prompt
from tango_jax.run import step_metrics, update_batch
from tango_jax.run.feedback import Rollouts, Solution
from tango_jax.tango.kind import Kind
from tango_jax.tango.schedule import Phase


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
    batch = update_batch.train_rows(_role(), prompts, COMPLETIONS)
    np.testing.assert_array_equal(batch.truncated, [1.0, 0.0, 0.0])


def _rollouts(rewards) -> Rollouts:
    problem = Problem("q", "1", "test", "0")
    sols = [Solution(problem, c, r, 0.0, ()) for c, r in zip(COMPLETIONS, rewards)]
    return Rollouts(1, Phase(Kind.GENERATOR, False), [problem], [], sols, {}, None, None)


def test_overlong_penalty_is_added_only_when_a_buffer_is_set():
    rollouts, alg = _rollouts([1.0, 0.0, 1.0]), AlgorithmConfig()
    same = update_batch.rollout_rewards(_role(), alg, rollouts)
    np.testing.assert_array_equal(same.values, [1.0, 0.0, 1.0])
    assert same.penalty is None
    # budget 10, buffer 4: 0 up to 6 tokens, -1/4 per token after, times the penalty 0.5
    shaped = update_batch.rollout_rewards(
        _role(overlong_buffer=4, overlong_penalty=0.5), alg, rollouts
    )
    np.testing.assert_allclose(shaped.values, [0.5, 0.0, 1.0 - 0.375])
    np.testing.assert_allclose(shaped.penalty, [-0.5, 0.0, -0.375])
    metrics = step_metrics.overlong_metrics(_role(), shaped)
    assert metrics.keys() == {"generator/overlong_penalty/mean"}
    assert np.isclose(metrics["generator/overlong_penalty/mean"], -0.875 / 3)
    assert step_metrics.overlong_metrics(_role(), same) == {}
