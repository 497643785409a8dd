"""The JAX references a vLLM server's log-probs are checked against, shared by
tests/rollout/test_vllm_sampler.py (Qwen2) and test_vllm_qwen3.py; the server fixtures are in
tests/rollout/conftest.py."""

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tango_jax.rollout.base import Prompt

# fp32 sampler vs fp32 JAX on CPU: see tango_jax/rollout/vllm/verify.py for the measurement.
ATOL = 1e-3
API_KEY = "test-key-3f9a"
PROMPTS = [Prompt((5, 6, 7, 8)), Prompt((9, 10, 11)), Prompt((40, 41, 42, 43, 44, 45))]


def perturbed(state):
    """The tiny model with changed parameters: layer 0's MLP output scaled, embedding noised."""
    flat = dict(nnx.to_flat_state(state))
    down = ("layers", 0, "mlp", "down")
    flat[down] = flat[down].replace(flat[down].get_value() * 1.5)
    embed = flat[("embed",)].get_value()
    noise = 0.02 * jax.random.normal(jax.random.key(1), embed.shape, embed.dtype)
    flat[("embed",)] = flat[("embed",)].replace(embed + noise)
    return nnx.from_flat_state(flat)


def worker_processes(sampler) -> list[str]:
    """The names of the model-worker processes under the sampler's first server (vLLM names
    them VLLM::Worker; VLLMServerConfig.worker_in_engine runs the model without one)."""
    import psutil

    root = psutil.Process(sampler.replicas[0].server.process.pid)
    return [p.name() for p in root.children(recursive=True) if "Worker" in p.name()]


PAD_TO = 64  # one compiled shape for every scoring call: causal, so right padding is inert


@jax.jit
def _logits(graphdef, state, tokens_1xL):
    return nnx.merge(graphdef, state)(tokens_1xL)[0]  # [L, V]


def _padded(seq):
    assert len(seq) <= PAD_TO
    return jnp.asarray([list(seq) + [0] * (PAD_TO - len(seq))], jnp.int32)


def jax_logprobs(model, state, prompt, tokens, temperature=1.0):
    """log softmax(logits / T) of `tokens` following `prompt`, from the JAX model."""
    seq = list(prompt) + list(tokens)
    logits = _logits(nnx.graphdef(model), state, _padded(seq))[len(prompt) - 1 : len(seq) - 1]
    logp = jax.nn.log_softmax(logits / (temperature or 1.0), axis=-1)
    return np.asarray(jnp.take_along_axis(logp, jnp.asarray(tokens)[:, None], axis=-1)[:, 0])


def jax_greedy(model, prompt, steps):
    seq = list(prompt)
    for _ in range(steps):
        logits = _logits(nnx.graphdef(model), nnx.state(model), _padded(seq))
        seq.append(int(jnp.argmax(logits[len(seq) - 1])))
    return seq[len(prompt) :]


def assert_logprobs_match(model, state, prompts, results, temperature=1.0):
    for prompt, group in zip(prompts, results):
        for c in group:
            ref = jax_logprobs(model, state, prompt.token_ids, c.token_ids, temperature)
            np.testing.assert_allclose(c.logprobs, ref, atol=ATOL)
