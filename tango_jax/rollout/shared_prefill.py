"""Prefill that computes each distinct prompt once and the batch's common prefix once.

A batch's rows are (prompt, sample) pairs: `n` samples of a prompt, and often the same prompt
text more than once (the verifier judges identical replies identically worded). Every prompt
also starts with the same tokens (the chat template's system turn, the verifier's
instructions). The plain prefill computes all of it again for every row; here:

1. the distinct prompts are prefilled once each, and every row gathers its prompt's keys and
   values (the KV cache after a prompt depends only on the prompt's tokens);
2. their longest common token prefix (rounded down to `PREFIX_GRANULE` tokens, so that a run
   compiles a handful of prefix widths) is prefilled once, as one row, and the distinct
   prompts' suffixes are prefilled on top of it (each suffix attends over the prefix's cached
   keys and values, which is what the plain prefill computes for those positions);
3. the suffixes are sorted by length and prefilled `group_rows` at a time, each group padded
   only to its own longest suffix (rounded up to `prompt_bucket`), so a batch of mixed lengths
   does not pad every row to the longest.

Then `assemble` lays the groups out as one decode cache: slots [0, F) the prefix, [F, F + W)
each prompt's suffix, left-padded to the widest group's width W (padding slots are invalid,
so positions and masks are those of the plain left-padded prefill), then N empty slots for the
new tokens. One common prefix per batch rather than a prefix tree: on the real Tango judging
prompts (docs/benchmarks.md, "Prefix sharing in the JAX sampler") the prompts of one question
share 24 tokens more than the batch's 40, but groups by question pad more than groups by
length, so a second level computes more positions, not fewer (7,936-9,328 against
6,440-7,464 on four logged steps).

Shape legend: U distinct prompts, G group rows, F prefix tokens, W suffix slots, B rows,
N new tokens, K kv heads, H head size, V vocab, L layers.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tango_jax.models.transformer import KVCache, Transformer
from tango_jax.parallel.buckets import round_up
from tango_jax.rollout.decode_loop import take_rows

PREFIX_GRANULE = 8  # the shared prefix's width is a multiple of this (compiled widths)


def common_prefix_len(prompts: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix that all `prompts` share."""
    first, n = prompts[0], min(len(p) for p in prompts)
    for p in prompts[1:]:
        k = 0
        while k < n and p[k] == first[k]:
            k += 1
        n = k
    return n


@dataclasses.dataclass(frozen=True)
class Group:
    """`group_rows` distinct prompts' suffixes, left-padded to `width` slots."""

    members: tuple[int, ...]  # indices into the distinct prompts (at most group_rows)
    tokens: np.ndarray  # [G, width] int32
    valid: np.ndarray  # [G, width] bool

    @property
    def width(self) -> int:
        return self.tokens.shape[1]


@dataclasses.dataclass(frozen=True)
class PrefillPlan:
    """How a batch's distinct prompts are prefilled: one shared prefix, then groups of suffixes.

    prefix: the shared tokens (F of them; empty when the prompts share fewer than
    PREFIX_GRANULE). slot_of[u]: distinct prompt u's row in the groups laid end to end
    (group i's rows are i·G .. i·G + G - 1).
    """

    prefix: tuple[int, ...]
    groups: tuple[Group, ...]
    slot_of: np.ndarray  # [U] int

    @property
    def suffix_slots(self) -> int:
        return max(g.width for g in self.groups)

    @property
    def prompt_slots(self) -> int:
        return len(self.prefix) + self.suffix_slots

    @property
    def prefill_tokens(self) -> int:
        """Token positions the plan computes (padding included): what the prefill costs."""
        return len(self.prefix) + sum(g.tokens.size for g in self.groups)


def plan_prefill(
    distinct: Sequence[Sequence[int]], *, group_rows: int, bucket: int, pad_id: int
) -> PrefillPlan:
    """The plan for `distinct` prompts (each at least one token): the shared prefix keeps at
    least one token of every prompt in its suffix, whose logits the first sample is drawn from."""
    common = common_prefix_len(distinct) if len(distinct) > 1 else len(distinct[0])
    common = min(common, min(len(p) for p in distinct) - 1)
    f = common // PREFIX_GRANULE * PREFIX_GRANULE
    order = sorted(range(len(distinct)), key=lambda u: -len(distinct[u]))  # longest first
    groups, slot_of = [], np.zeros(len(distinct), np.int64)
    for start in range(0, len(order), group_rows):
        members = order[start : start + group_rows]
        width = round_up(max(len(distinct[u]) - f for u in members), bucket)
        tokens = np.full((group_rows, width), pad_id, np.int32)
        valid = np.zeros((group_rows, width), bool)
        for i, u in enumerate(members):
            suffix = distinct[u][f:]
            tokens[i, width - len(suffix) :] = suffix
            valid[i, width - len(suffix) :] = True
            slot_of[u] = start + i
        groups.append(Group(tuple(members), tokens, valid))
    return PrefillPlan(tuple(distinct[0][:f]), tuple(groups), slot_of)


def _prefill_prefix(state, prefix_1xF, *, graphdef, cache_dtype):
    """The prefix's keys and values: (k, v), L arrays [1, K, F, H] each."""
    model: Transformer = nnx.merge(graphdef, state)
    cache = KVCache.init(model.config, 1, prefix_1xF.shape[1], cache_dtype)
    _, cache = model.forward_with_cache(prefix_1xF, cache, last_only=True)
    return cache.k, cache.v


def _prefill_group(state, prefix_kv, tokens_GxW, valid_GxW, *, graphdef, cache_dtype):
    """One group's suffixes on top of the prefix (`prefix_kv` None: no prefix). Returns the
    group's KVCache over F + W slots and the logits of each row's last token [G, V]."""
    model: Transformer = nnx.merge(graphdef, state)
    g, w = tokens_GxW.shape
    f = 0 if prefix_kv is None else prefix_kv[0][0].shape[2]
    cache = KVCache.init(model.config, g, f + w, cache_dtype)
    if f:

        def with_prefix(buf, pre):  # [G, K, F + W, H] with the prefix in slots 0..F-1
            return jax.lax.dynamic_update_slice(
                buf, jnp.broadcast_to(pre, (g, *pre.shape[1:])), (0, 0, 0, 0)
            )

        cache = KVCache(
            k=tuple(map(with_prefix, cache.k, prefix_kv[0])),
            v=tuple(map(with_prefix, cache.v, prefix_kv[1])),
            valid=cache.valid.at[:, :f].set(True),
            lengths=jnp.full((g,), f, jnp.int32),
            index=jnp.asarray(f, jnp.int32),
        )
    logits, cache = model.forward_with_cache(tokens_GxW, cache, valid_GxW, last_only=True)
    return cache, logits[:, -1]


def _assemble(groups, row_slot_B, *, prefix: int, suffix_slots: int, new_tokens: int):
    """The decode cache of B rows from the groups' caches: row b takes the prompt in slot
    row_slot[b]; each group's suffix is moved to the end of the W suffix slots (left padding)
    and N empty slots follow. Returns (KVCache [B, K, F + W + N, H], last logits [B, V])."""

    def place(buf, width):  # [G, K, F + w, H] -> [G, K, F + W + N, H]
        g, kh, _, h = buf.shape
        pad_before = jnp.zeros((g, kh, suffix_slots - width, h), buf.dtype)
        pad_after = jnp.zeros((g, kh, new_tokens, h), buf.dtype)
        return jnp.concatenate([buf[:, :, :prefix], pad_before, buf[:, :, prefix:], pad_after], 2)

    def place_valid(valid, width):
        g = valid.shape[0]
        return jnp.concatenate(
            [
                valid[:, :prefix],
                jnp.zeros((g, suffix_slots - width), bool),
                valid[:, prefix:],
                jnp.zeros((g, new_tokens), bool),
            ],
            axis=1,
        )

    widths = [c.valid.shape[1] - prefix for c, _ in groups]

    def rows(per_group):  # concatenate the groups, then gather the rows
        return take_rows(jnp.concatenate(per_group, axis=0), row_slot_B)

    layers = len(groups[0][0].k)
    k = tuple(rows([place(c.k[i], w) for (c, _), w in zip(groups, widths)]) for i in range(layers))
    v = tuple(rows([place(c.v[i], w) for (c, _), w in zip(groups, widths)]) for i in range(layers))
    cache = KVCache(
        k=k,
        v=v,
        valid=rows([place_valid(c.valid, w) for (c, _), w in zip(groups, widths)]),
        lengths=rows([c.lengths for c, _ in groups]),
        index=jnp.asarray(prefix + suffix_slots, jnp.int32),
    )
    return cache, rows([last for _, last in groups])


class SharedPrefill:
    """The jitted pieces of a shared prefill for one model (each compiles once per shape)."""

    def __init__(self, graphdef, cache_dtype):
        self.prefix = jax.jit(
            functools.partial(_prefill_prefix, graphdef=graphdef, cache_dtype=cache_dtype)
        )
        self.group = jax.jit(
            functools.partial(_prefill_group, graphdef=graphdef, cache_dtype=cache_dtype)
        )
        self.assemble = jax.jit(_assemble, static_argnames=("prefix", "suffix_slots", "new_tokens"))

    def __call__(self, state, plan: PrefillPlan, row_slot_B, new_tokens: int, put_rows, put_one):
        """(KVCache of the rows over plan.prompt_slots + new_tokens slots, last logits [B, V]).
        put_rows / put_one place a host array on the mesh (rows sharded / replicated)."""
        prefix_kv = None
        if plan.prefix:
            prefix_kv = self.prefix(state, put_one(np.asarray([plan.prefix], np.int32)))
        groups = [
            self.group(state, prefix_kv, put_rows(g.tokens), put_rows(g.valid)) for g in plan.groups
        ]
        return self.assemble(
            groups,
            row_slot_B,
            prefix=len(plan.prefix),
            suffix_slots=plan.suffix_slots,
            new_tokens=new_tokens,
        )
