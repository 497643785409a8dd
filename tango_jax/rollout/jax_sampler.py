"""The embedded sampler: batched prefill + KV-cache decode, jitted, on the trainer's mesh.

It shares the trainer's model object, so new weights are visible without a copy;
`update_weights` only records the version (or loads a given state).

One compiled program per (row bucket, prompt bucket, max_tokens, greedy/top-k/top-p) key:
rows are padded to a multiple of `row_bucket`, prompts (left-padded) to a multiple of
`prompt_bucket`, and decoding runs `max_tokens` steps at most in a `lax.while_loop` that
exits as soon as every row has finished. Stop token ids (EOS) end rows inside the loop;
stop *strings* are applied on the host afterwards (the completion is cut after the token
that completes the string), which keeps the compiled program independent of the tokenizer.

Sampling: logits / temperature -> optional top-k -> optional top-p (nucleus) -> categorical;
`temperature == 0` is greedy. The reported log-prob of each token is under logits /
temperature before filtering (what the trainer's log-prob pass computes), see base.py.

Shape legend: B rows (prompts x n, padded), P prompt slots, N new tokens (max_tokens), V vocab.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from tango_jax.models.transformer import KVCache, Transformer
from tango_jax.parallel.buckets import round_up
from tango_jax.parallel.distributed import fetch, put
from tango_jax.rollout.base import Completion, FinishReason, Prompt, SamplingParams


@dataclasses.dataclass(frozen=True)
class _Program:
    """The static part of a generate call (one compiled program per distinct value)."""

    greedy: bool
    top_k: int
    top_p: float
    max_tokens: int


def _filter_logits(logits_BxV, top_k: int, top_p: float):
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


def _generate(
    state,
    prompt_BxP,
    valid_BxP,
    key,
    temperature,
    stop_ids,
    *,
    graphdef,
    program: _Program,
    cache_dtype,
    decode_block: int = 0,
):
    """Prefill then decode. Returns tokens [B, N], logprobs [B, N], lengths [B], stopped [B].

    decode_block 0: one `lax.while_loop` whose steps attend over the whole cache (P + N
    slots, the unfilled ones masked). Else the steps run in chunks (`decode_chunks`), one
    while-loop each, whose attention reads only a static prefix of the cache; the same
    tokens, keys and step count, so the same samples up to float summation order.
    """
    model: Transformer = nnx.merge(graphdef, state)
    b, p = prompt_BxP.shape
    n = program.max_tokens
    chunks = decode_chunks(p, n, decode_block)
    cache = KVCache.init(model.config, b, p + n, cache_dtype)
    logits, cache = model.forward_with_cache(
        prompt_BxP, cache, valid_BxP, span=None if decode_block <= 0 else p, last_only=True
    )
    last = logits[:, -1]  # [B, V]: left padding puts every prompt's last token in column P-1

    def sample(step_key, logits_BxV):
        logits_BxV = logits_BxV.astype(jnp.float32)
        if program.greedy:
            tok = jnp.argmax(logits_BxV, axis=-1)
            return tok, jax.nn.log_softmax(logits_BxV)[jnp.arange(b), tok]
        scaled = logits_BxV / temperature
        filtered = _filter_logits(scaled, program.top_k, program.top_p)
        tok = jax.random.categorical(step_key, filtered, axis=-1)
        return tok, jax.nn.log_softmax(scaled)[jnp.arange(b), tok]

    def cond(carry, end):
        step, _, _, _, _, done, _ = carry
        return (step < end) & ~jnp.all(done)

    def body(carry, span):
        step, cache, last, tokens, logps, done, lengths = carry
        tok, lp = sample(jax.random.fold_in(key, step), last)
        tok = jnp.where(done, 0, tok).astype(jnp.int32)
        tokens = tokens.at[:, step].set(tok)
        logps = logps.at[:, step].set(jnp.where(done, 0.0, lp))
        lengths = lengths + (~done).astype(jnp.int32)
        new_done = done | jnp.any(tok[:, None] == stop_ids[None, :], axis=-1)
        logits, cache = model.forward_with_cache(tok[:, None], cache, (~done)[:, None], span=span)
        return step + 1, cache, logits[:, 0], tokens, logps, new_done, lengths

    carry = (
        jnp.zeros((), jnp.int32),
        cache,
        last,
        jnp.zeros((b, n), jnp.int32),
        jnp.zeros((b, n), jnp.float32),
        ~valid_BxP.any(axis=1),
        jnp.zeros((b,), jnp.int32),
    )
    for end, span in chunks:  # each chunk exits at once if every row has finished
        carry = jax.lax.while_loop(
            functools.partial(cond, end=end), functools.partial(body, span=span), carry
        )
    _, _, _, tokens, logps, done, lengths = carry
    return tokens, logps, lengths, done


def generate_program(
    graphdef, *, max_tokens: int, cache_dtype, decode_block: int = 0, greedy: bool = False,
    top_k: int = -1, top_p: float = 1.0,
):  # fmt: skip
    """The jitted generate of a model `graphdef` for one static setting: called as
    (state, prompt [B, P] int32, valid [B, P] bool, key, temperature, stop_ids), it returns
    tokens, log-probs [B, max_tokens], lengths and stopped [B]. What `JaxSampler` compiles per
    setting, and what `rollout.memory_plan.generate_memory` plans from abstract arrays."""
    program = _Program(greedy, top_k, top_p, max_tokens)
    return jax.jit(
        functools.partial(
            _generate,
            graphdef=graphdef,
            program=program,
            cache_dtype=cache_dtype,
            decode_block=decode_block,
        )
    )


class JaxSampler:
    """Implements `tango_jax.rollout.base.Sampler` on the trainer's model and mesh.

    model: the (shared) NNX model; tokenizer: its HF tokenizer (decoding, stop strings).
    max_rows: rows per compiled call; larger requests are split into several calls.
    decode_block: 0 (default): every decode step attends over the whole preallocated cache
    (prompt + max_tokens slots, the unfilled ones masked). > 0: decode in chunks that end at
    decode_block, 2·decode_block, 4·decode_block, ... steps, each attending over a static
    prefix of the cache that covers the slots filled by its end (`decode_chunks`), so a step
    reads about the filled slots rather than all of them. The same tokens and log-probs up to
    float summation order (tests/rollout/test_jax_sampler.py); a GPU A/B is
    scripts/bench/gpu_check.py's `decode_block` switch.
    """

    def __init__(
        self,
        model: Transformer,
        tokenizer: Any,
        *,
        mesh: Mesh,
        max_rows: int = 256,
        row_bucket: int = 8,
        prompt_bucket: int = 64,
        cache_dtype=None,
        decode_block: int = 0,
    ):
        if decode_block < 0:
            raise ValueError(
                f"JaxSampler decode_block ({decode_block}) must be >= 0 (0: attend over the "
                "whole cache)."
            )
        self.model, self.tokenizer, self.mesh = model, tokenizer, mesh
        self.decode_block = decode_block
        dp = mesh.shape["data"] * mesh.shape["fsdp"]
        self.row_bucket = round_up(row_bucket, dp)
        self.max_rows = round_up(max_rows, self.row_bucket)
        self.prompt_bucket = prompt_bucket
        self.cache_dtype = cache_dtype or model.config.dtype
        self.pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
        self.weight_version = 0
        self._rows_sharding = NamedSharding(mesh, P(("data", "fsdp")))
        self._calls = 0
        self._compiled: dict[Any, Any] = {}

    # --- protocol ---

    def update_weights(self, params: Any, version: int) -> dict[str, float]:
        """Records `version`; loads `params` only if they are not the shared model's own arrays
        (the trainer updates the shared model in place, so usually there is nothing to copy)."""
        if params is not None:
            own = jax.tree.leaves(nnx.state(self.model))
            new = jax.tree.leaves(params)
            if len(own) != len(new) or any(a is not b for a, b in zip(own, new)):
                nnx.update(self.model, params)
        self.weight_version = version
        return {}

    def close(self) -> None:
        self._compiled.clear()

    def hold_weights(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to hold: it never reloads weights. (It samples with the trainer's own
        arrays, so it must not run beside an update at all: the loop runs it before.)"""
        return contextlib.nullcontext()

    def metrics(self) -> dict[str, float]:
        return {}  # in-process: no servers to restart, no requests to retry

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        rows = [pr.token_ids for pr in prompts for _ in range(params.n)]
        out: list[Completion] = []
        base_seed = params.seed if params.seed is not None else self._next_seed()
        for start in range(0, len(rows), self.max_rows):
            chunk = rows[start : start + self.max_rows]
            key = jax.random.fold_in(jax.random.key(base_seed), start)
            out.extend(self._generate_rows(chunk, params, key))
        return [out[i * params.n : (i + 1) * params.n] for i in range(len(prompts))]

    # --- internals ---

    def _next_seed(self) -> int:
        self._calls += 1
        return 0x7A6 + self._calls

    def _program_fn(self, program: _Program):
        if program not in self._compiled:
            self._compiled[program] = generate_program(
                nnx.graphdef(self.model),
                cache_dtype=self.cache_dtype,
                decode_block=self.decode_block,
                **dataclasses.asdict(program),
            )
        return self._compiled[program]

    def _generate_rows(self, rows, params: SamplingParams, key) -> list[Completion]:
        b = round_up(len(rows), self.row_bucket)
        p = round_up(max(len(r) for r in rows), self.prompt_bucket)
        prompt = np.full((b, p), self.pad_id, np.int32)
        valid = np.zeros((b, p), bool)
        for i, r in enumerate(rows):
            prompt[i, p - len(r) :] = r
            valid[i, p - len(r) :] = True
        stop_ids = sorted(set(self.model.config.eos_token_ids) | set(params.stop_token_ids)) or [-1]
        program = _Program(params.greedy, params.top_k, params.top_p, params.max_tokens)
        with jax.set_mesh(self.mesh):
            tokens, logps, lengths, stopped = self._program_fn(program)(
                nnx.state(self.model),
                put(prompt, self._rows_sharding),
                put(valid, self._rows_sharding),
                key,
                jnp.float32(max(params.temperature, 1e-6)),
                jnp.asarray(stop_ids, jnp.int32),
            )
        tokens, logps, lengths, stopped = fetch((tokens, logps, lengths, stopped))
        return [
            self._completion(
                tokens[i, : lengths[i]], logps[i, : lengths[i]], bool(stopped[i]), params
            )
            for i in range(len(rows))
        ]

    def _completion(
        self, ids: np.ndarray, logps: np.ndarray, stopped: bool, params: SamplingParams
    ) -> Completion:
        ids, logps = ids.tolist(), logps.tolist()
        finish = FinishReason.STOP if stopped else FinishReason.LENGTH
        if params.stop:
            cut = _stop_string_cut(self.tokenizer, ids, params.stop)
            if cut is not None:
                ids, logps, finish = ids[:cut], logps[:cut], FinishReason.STOP
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Completion(tuple(ids), text, tuple(logps), finish, self.weight_version)


def _stop_string_cut(tokenizer, ids: list[int], stops: Sequence[str]) -> int | None:
    """Number of tokens up to and including the one that completes the first stop string."""
    text = tokenizer.decode(ids, skip_special_tokens=True)
    first = min((i + len(s) for s in stops if (i := text.find(s)) >= 0), default=None)
    if first is None:
        return None
    lo, hi = 1, len(ids)  # smallest prefix whose decoded text reaches the stop string's end
    while lo < hi:
        mid = (lo + hi) // 2
        if len(tokenizer.decode(ids[:mid], skip_special_tokens=True)) >= first:
            hi = mid
        else:
            lo = mid + 1
    return lo
