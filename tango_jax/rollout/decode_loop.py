"""Decoding in segments that drop the rows that have finished.

The plain decode runs every row until the last one stops: on the real Tango batches about half
of the row-steps belonged to rows that had already emitted EOS (docs/benchmarks.md, "Prefix
sharing in the JAX sampler"). Here the decode runs a segment of steps at a time (one jitted
`lax.while_loop` per segment, which still exits as soon as every row has stopped); after each
segment the host reads which rows are done, and once at most half of the rows are still running
it gathers them into a batch half as large (or a quarter, ...: a multiple of `row_bucket`),
cache and all. A row's samples do not depend on its batch (each row has its own random stream,
rollout/sampling.py), so the tokens are those of the plain decode.

The segments: `segment` steps each over the whole cache (decode_block 0), or the chunks of
`decode_chunks` (decode_block > 0), each attending over the filled prefix of the cache only.
Compiled programs: one per (rows, cache slots, segment); the row counts are B, B/2, B/4, ...

Shape legend: B rows, S cache slots, V vocab, T segment steps, N max_tokens.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from tango_jax.models.transformer import KVCache, Transformer
from tango_jax.parallel.buckets import round_up
from tango_jax.parallel.distributed import fetch
from tango_jax.parallel.mesh import constrain
from tango_jax.rollout.sampling import Sampling, sample_step


def decode_chunks(prompt_slots: int, max_tokens: int, block: int) -> list[tuple[int, int | None]]:
    """The chunked decode's schedule: (end step, cache slots read) per chunk, in order.

    block 0: one chunk of all `max_tokens` steps reading the whole cache (span None). Else the
    chunks end at block, 2·block, 4·block, ... steps (capped at max_tokens), and the steps of a
    chunk ending at step e attend over the first P + e slots: every slot written so far, and at
    most twice the generated part beyond it. Each chunk is a separate piece of the compiled
    program (about log2(N / block) + 1 of them).
    """
    if block <= 0:
        return [(max_tokens, None)]
    ends, end = [], block
    while end < max_tokens:
        ends.append(end)
        end *= 2
    ends.append(max_tokens)
    return [(e, prompt_slots + e) for e in ends]


def segments(prompt_slots: int, max_tokens: int, *, segment: int, block: int):
    """(start, end, span) of each decode segment: fixed `segment`-step pieces over the whole
    cache (block 0), or the chunks of `decode_chunks`."""
    if block > 0:
        ends = decode_chunks(prompt_slots, max_tokens, block)
    else:
        ends = [(min(e, max_tokens), None) for e in range(segment, max_tokens + segment, segment)]
    starts = [0] + [e for e, _ in ends[:-1]]
    return [(s, e, span) for s, (e, span) in zip(starts, ends)]


def _segment(
    state, cache: KVCache, last_BxV, row_ids_B, done_B, key, step0, temperature, stop_ids, *,
    graphdef, sampling: Sampling, steps: int, span: int | None,
):  # fmt: skip
    """Decode steps step0 .. step0 + steps - 1 (fewer once every row is done). Returns (cache,
    last logits, done, tokens [B, T], log-probs [B, T], tokens each row generated [B], steps
    run). Finished rows write token 0 and log-prob 0."""
    model: Transformer = nnx.merge(graphdef, state)
    b = last_BxV.shape[0]
    end = step0 + steps

    def cond(carry):
        step, _, _, _, _, done, _ = carry
        return (step < end) & ~jnp.all(done)

    def body(carry):
        step, cache, last, tokens, logps, done, count = carry
        tok, lp = sample_step(key, row_ids_B, step, last, temperature, sampling)
        tok = jnp.where(done, 0, tok)
        tokens = tokens.at[:, step - step0].set(tok)
        logps = logps.at[:, step - step0].set(jnp.where(done, 0.0, lp))
        new_done = done | jnp.any(tok[:, None] == stop_ids[None, :], axis=-1)
        logits, cache = model.forward_with_cache(tok[:, None], cache, (~done)[:, None], span=span)
        return step + 1, cache, logits[:, 0], tokens, logps, new_done, count + ~done

    carry = (
        step0,
        cache,
        last_BxV,
        jnp.zeros((b, steps), jnp.int32),
        jnp.zeros((b, steps), jnp.float32),
        done_B,
        jnp.zeros((b,), jnp.int32),
    )
    step, cache, last, tokens, logps, done, count = jax.lax.while_loop(cond, body, carry)
    return cache, last, done, tokens, logps, count, step - step0


def take_rows(x, idx_B):
    """Rows `idx` of x [rows, ...], sharded over the mesh's batch axes like x's rows."""
    idx_B = constrain(idx_B, (None,))  # every device reads the whole index
    return constrain(jnp.take(x, idx_B, axis=0), ("batch",) + (None,) * (x.ndim - 1))


def _take_rows(tree, idx_B):
    """Rows `idx` of (cache, [B, ...] arrays ...) (the cache's scalar index kept)."""
    cache, *rest = tree
    cache = KVCache(
        k=tuple(take_rows(x, idx_B) for x in cache.k),
        v=tuple(take_rows(x, idx_B) for x in cache.v),
        valid=take_rows(cache.valid, idx_B),
        lengths=take_rows(cache.lengths, idx_B),
        index=cache.index,
    )
    return (cache, *(take_rows(x, idx_B) for x in rest))


class SegmentedDecode:
    """The jitted segment and row-gather programs of one model (see the module docstring)."""

    def __init__(self, graphdef, *, segment: int, block: int, row_bucket: int):
        self.graphdef, self.segment, self.block = graphdef, segment, block
        self.row_bucket = row_bucket
        self._programs: dict[tuple, object] = {}
        self._take = jax.jit(_take_rows)

    def _program(self, sampling: Sampling, steps: int, span: int | None):
        name = (sampling, steps, span)
        if name not in self._programs:
            self._programs[name] = jax.jit(
                functools.partial(
                    _segment, graphdef=self.graphdef, sampling=sampling, steps=steps, span=span
                ),
                donate_argnames=("cache", "last_BxV"),
            )
        return self._programs[name]

    def __call__(
        self, state, cache: KVCache, last_BxV, row_ids: np.ndarray, done: np.ndarray, key,
        temperature, stop_ids, *, sampling: Sampling, prompt_slots: int, put_rows,
    ):  # fmt: skip
        """Decodes a batch to the end. row_ids: [B] each row's index in the call (its random
        stream); done: [B] host bools (True for padding rows). Returns host arrays tokens
        [B, N] int32, log-probs [B, N] float32, lengths [B] and stopped [B] (an EOS / stop
        token ended the row) in the batch's row order."""
        b0, n = len(done), sampling.max_tokens
        tokens = np.zeros((b0, n), np.int32)
        logps = np.zeros((b0, n), np.float32)
        lengths = np.zeros(b0, np.int64)
        stopped = done.copy()
        rows = np.arange(b0)  # the batch row that each current row is
        done_dev, ids_dev = put_rows(done), put_rows(row_ids.astype(np.int32))
        for start, end, span in segments(prompt_slots, n, segment=self.segment, block=self.block):
            if done.all():
                break
            program = self._program(sampling, end - start, span)
            cache, last_BxV, done_dev, tok, lp, count, ran = program(
                state, cache, last_BxV, ids_dev, done_dev, key, jnp.int32(start), temperature,
                stop_ids,
            )  # fmt: skip
            done, tok, lp, count, ran = fetch((done_dev, tok, lp, count, ran))
            ran = int(ran)
            tokens[rows, start : start + ran] = tok[:, :ran]  # finished rows wrote zeros
            logps[rows, start : start + ran] = lp[:, :ran]
            lengths[rows] += count
            stopped[rows] |= done
            keep = self._smaller_batch(done)
            if keep is not None and end < n:
                cache, last_BxV, ids_dev, done_dev = self._take(
                    (cache, last_BxV, ids_dev, done_dev), put_rows(keep)
                )
                rows, done = rows[keep], done[keep]
        return tokens, logps, lengths, stopped

    def _smaller_batch(self, done: np.ndarray) -> np.ndarray | None:
        """Indices of the rows of a batch about half as large or smaller (half, a quarter, ...
        of the rows, each rounded up to a multiple of row_bucket) that holds every running
        row, padded with finished ones; None: keep the batch."""
        b, running = len(done), int((~done).sum())
        size = b
        while (half := round_up(-(-size // 2), self.row_bucket)) < size and half >= running:
            size = half
        if size == b:
            return None
        live = np.flatnonzero(~done)
        filler = np.flatnonzero(done)[: size - len(live)]
        return np.concatenate([live, filler]).astype(np.int32)
