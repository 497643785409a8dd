"""One sampling step of the JAX sampler: logits -> (token, log-prob) per row, each row with its
own random stream, so that a row's samples do not depend on which other rows share its batch
(the prefix-sharing sampler regroups and compacts rows): row r of a call with key k draws its
step-t seed from fold_in(fold_in(k, r), t).

Sampling: logits / temperature -> optional top-k -> optional top-p (nucleus) -> one draw from
the remaining distribution; `greedy` takes the argmax. The reported log-prob of each token is
under logits / temperature before filtering (what the trainer's log-prob pass computes, see
base.py).

The draw is an exponential race, the Gumbel-max trick in another form: token = argmax_j p_j /
E_j with E_j ~ Exp(1) independent, which picks j with probability p_j / sum(p). The E_j come
from one 32-bit seed per row and step (threefry, `jax.random.bits`) spread over the vocabulary
by an integer hash (`hash32`, the "lowbias32" mixer) of (seed, token id), then E = -log(u) for
u = the hash's top 24 bits as a float in (0, 1). `jax.random.categorical` draws V threefry
numbers and takes two logarithms of each: on a 2-core CPU, 64 rows of SmolLM2's 49,152-token
vocabulary took 60 ms against 8 ms for this draw (2026-12-05), each step of the decode.
An inverse-CDF draw (one uniform per row, 3 ms) was tried and dropped: it maps a float-rounding
difference in the probabilities onto a different tail token (sensitivity 1 / p of the token at
u), so the shared and plain samplers parted on 3 of 64 SmolLM2 rows within 48 tokens, where
a race parts only on a near-tie of its two best entries.

Shape legend: B rows, V vocab.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


def filter_logits(logits_BxV, top_k: int, top_p: float):
    """Sets logits outside the top-k / nucleus to -inf (static k and p; -1 / 1.0 disable)."""
    neg = jnp.finfo(logits_BxV.dtype).min
    if top_k > 0:
        kth = jax.lax.top_k(logits_BxV, top_k)[0][:, -1:]
        logits_BxV = jnp.where(logits_BxV < kth, neg, logits_BxV)
    if top_p < 1.0:
        sorted_desc = jnp.sort(logits_BxV, axis=-1)[:, ::-1]
        probs = jax.nn.softmax(sorted_desc, axis=-1)
        cum_before = jnp.cumsum(probs, axis=-1) - probs  # mass of strictly larger tokens
        # the smallest logit kept: the last sorted position whose preceding mass < top_p
        keep = cum_before < top_p
        cutoff = jnp.min(jnp.where(keep, sorted_desc, jnp.inf), axis=-1, keepdims=True)
        logits_BxV = jnp.where(logits_BxV < cutoff, neg, logits_BxV)
    return logits_BxV


def hash32(x):
    """The "lowbias32" integer hash (C. Wellons' hash-prospector): a bijection of uint32 whose
    output bits each flip with probability ~1/2 when any input bit flips."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def race_draw(seeds_B, logits_BxV):
    """The token each row draws from softmax(logits) with the uint32 seed `seeds[b]` (entries
    at the dtype's minimum have probability 0 and are never drawn)."""
    ids = hash32(jnp.arange(logits_BxV.shape[1], dtype=jnp.uint32) * jnp.uint32(0x9E3779B9) + 1)
    bits = hash32(seeds_B[:, None] ^ ids[None, :])  # [B, V]
    u = ((bits >> 8).astype(jnp.float32) + 0.5) * (1.0 / 2**24)  # in (0, 1)
    p = jnp.exp(logits_BxV - jnp.max(logits_BxV, axis=-1, keepdims=True))
    return jnp.argmax(p / -jnp.log(u), axis=-1).astype(jnp.int32)


@dataclasses.dataclass(frozen=True)
class Sampling:
    """The static part of a generate call (one compiled program per distinct value)."""

    greedy: bool
    top_k: int
    top_p: float
    max_tokens: int


def sample_step(key, row_ids_B, step, logits_BxV, temperature, sampling: Sampling):
    """(token [B] int32, log-prob [B] float32) of every row at decode step `step`.

    key: the call's PRNG key; row_ids: each row's index in the call. Row r draws its step-t
    seed from fold_in(fold_in(key, r), t), whatever batch it is in.
    """
    logits_BxV = logits_BxV.astype(jnp.float32)
    rows = jnp.arange(logits_BxV.shape[0])
    if sampling.greedy:
        tok = jnp.argmax(logits_BxV, axis=-1).astype(jnp.int32)
        return tok, jax.nn.log_softmax(logits_BxV)[rows, tok]
    scaled = logits_BxV / temperature
    seeds = jax.vmap(
        lambda r: jax.random.bits(
            jax.random.fold_in(jax.random.fold_in(key, r), step), (), jnp.uint32
        )
    )(row_ids_B)
    tok = race_draw(seeds, filter_logits(scaled, sampling.top_k, sampling.top_p))
    return tok, jax.nn.log_softmax(scaled)[rows, tok]
