"""The embedded sampler: batched prefill + KV-cache decode, jitted, on the trainer's mesh.

It shares the trainer's model object, so new weights are visible without a copy;
`update_weights` only records the version (or loads a given state).

Two paths, the same samples (tests/rollout/test_shared_prefix.py):

- share_prefix (default): each distinct prompt is prefilled once and its n samples share its
  keys and values; the prompts' common prefix is prefilled once per batch; suffixes are
  prefilled in groups of similar length (rollout/shared_prefill.py); the decode runs in
  segments and drops the rows that have finished (rollout/decode_loop.py).
- plain (`share_prefix=False`): every row (prompt x sample) is prefilled on its own, left-padded
  to the batch's longest prompt, and the decode runs every row until the last has finished.
  One compiled program per (row bucket, prompt bucket, max_tokens, greedy/top-k/top-p) key.

Rows are padded to a multiple of `row_bucket`, prompt widths to a multiple of `prompt_bucket`,
and decoding runs `max_tokens` steps at most in `lax.while_loop`s that exit as soon as every
row has finished. Stop token ids (EOS) end rows inside the loop; stop *strings* are applied on
the host afterwards (the completion is cut after the token that completes the string), which
keeps the compiled programs independent of the tokenizer.

Sampling (rollout/sampling.py): logits / temperature -> optional top-k -> optional top-p ->
one exponential-race draw per row from the row's own random stream (row r of a call, step t:
fold_in(fold_in(key(seed), r), t)), so a row's samples do not depend on the batch it is in or
on `max_rows`; `temperature == 0` is greedy. The reported log-prob of each token is under
logits / temperature before filtering (what the trainer's log-prob pass computes), see base.py.

Shape legend: B rows (prompts x n, padded), P prompt slots, N new tokens (max_tokens), V vocab.
"""

from __future__ import annotations

import contextlib
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
from tango_jax.rollout.decode_loop import SegmentedDecode, decode_chunks
from tango_jax.rollout.sampling import Sampling, sample_step
from tango_jax.rollout.shared_prefill import SharedPrefill, plan_prefill

# Decode steps between two looks at which rows have finished (share_prefix, decode_block 0):
# each look is a host round trip; 16 steps of a 64-row SmolLM2 batch take 2.9-3.7 s on 2 cores
# (0.18-0.23 s a step over 64-512 cache slots, scripts/bench/bench_decode_step.py).
DECODE_SEGMENT = 16
ROW_BUCKET = 8  # rows per call padded to a multiple of this (and of the data-parallel devices)


def _generate(
    state,
    prompt_BxP,
    valid_BxP,
    key,
    temperature,
    stop_ids,
    first_row=0,
    *,
    graphdef,
    program: Sampling,
    cache_dtype,
    decode_block: int = 0,
):
    """Prefill then decode (the plain path). Returns tokens [B, N], logprobs [B, N], lengths
    [B], stopped [B]. Row b draws from the random stream of row first_row + b of the call.

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
    row_ids = first_row + jnp.arange(b)

    def cond(carry, end):
        step, _, _, _, _, done, _ = carry
        return (step < end) & ~jnp.all(done)

    def body(carry, span):
        step, cache, last, tokens, logps, done, lengths = carry
        tok, lp = sample_step(key, row_ids, step, last, temperature, program)
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
    """The jitted plain generate of a model `graphdef` for one static setting: called as
    (state, prompt [B, P] int32, valid [B, P] bool, key, temperature, stop_ids[, first_row]),
    it returns tokens, log-probs [B, max_tokens], lengths and stopped [B]. What `JaxSampler`
    compiles per setting with share_prefix off, and what `rollout.memory_plan.generate_memory`
    plans from abstract arrays."""
    program = Sampling(greedy, top_k, top_p, max_tokens)
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
    max_rows: rows per decode batch; larger requests are split into several batches.
    share_prefix: True (default): prefill each distinct prompt and the batch's common prefix
    once, and drop finished rows from the decode (see the module docstring); False: the plain
    path, which computes every row in full. The same tokens, and log-probs up to float
    summation order. decode_segment: decode steps between two looks at which rows finished.
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
        row_bucket: int = ROW_BUCKET,
        prompt_bucket: int = 64,
        cache_dtype=None,
        decode_block: int = 0,
        share_prefix: bool = True,
        decode_segment: int = DECODE_SEGMENT,
    ):
        if decode_segment < 1:
            raise ValueError(f"JaxSampler decode_segment ({decode_segment}) must be >= 1.")
        if decode_block < 0:
            raise ValueError(
                f"JaxSampler decode_block ({decode_block}) must be >= 0 (0: attend over the "
                "whole cache)."
            )
        self.model, self.tokenizer, self.mesh = model, tokenizer, mesh
        self.decode_block, self.share_prefix = decode_block, share_prefix
        self.decode_segment = decode_segment
        dp = mesh.shape["data"] * mesh.shape["fsdp"]
        self.row_bucket = round_up(row_bucket, dp)
        self.max_rows = round_up(max_rows, self.row_bucket)
        self.prompt_bucket = prompt_bucket
        self.cache_dtype = cache_dtype or model.config.dtype
        self.pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
        self.weight_version = 0
        self._rows_sharding = NamedSharding(mesh, P(("data", "fsdp")))
        self._replicated = NamedSharding(mesh, P())
        self._calls = 0
        self._compiled: dict[Any, Any] = {}
        self._shared: tuple[SharedPrefill, SegmentedDecode] | None = None

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
        self._shared = None

    def hold_weights(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to hold: it never reloads weights. (It samples with the trainer's own
        arrays, so it must not run beside an update at all: the loop runs it before.)"""
        return contextlib.nullcontext()

    def metrics(self) -> dict[str, float]:
        return {}  # in-process: no servers to restart, no requests to retry

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        rows = [tuple(pr.token_ids) for pr in prompts for _ in range(params.n)]
        out: list[Completion] = []
        base_seed = params.seed if params.seed is not None else self._next_seed()
        key = jax.random.key(base_seed)
        run = self._generate_shared if self.share_prefix else self._generate_rows
        for start in range(0, len(rows), self.max_rows):
            out.extend(run(rows[start : start + self.max_rows], params, key, start))
        return [out[i * params.n : (i + 1) * params.n] for i in range(len(prompts))]

    # --- internals ---

    def _next_seed(self) -> int:
        self._calls += 1
        return 0x7A6 + self._calls

    def _program_fn(self, program: Sampling):
        if program not in self._compiled:
            self._compiled[program] = generate_program(
                nnx.graphdef(self.model),
                cache_dtype=self.cache_dtype,
                decode_block=self.decode_block,
                greedy=program.greedy,
                top_k=program.top_k,
                top_p=program.top_p,
                max_tokens=program.max_tokens,
            )
        return self._compiled[program]

    def _call_args(self, params: SamplingParams):
        """(Sampling, temperature, stop ids) of a call, as the programs take them."""
        stop_ids = sorted(set(self.model.config.eos_token_ids) | set(params.stop_token_ids)) or [-1]
        program = Sampling(params.greedy, params.top_k, params.top_p, params.max_tokens)
        temperature = jnp.float32(max(params.temperature, 1e-6))
        return program, temperature, jnp.asarray(stop_ids, jnp.int32)

    def _generate_rows(self, rows, params: SamplingParams, key, first_row: int) -> list[Completion]:
        """The plain path: every row prefilled and decoded in full."""
        b = round_up(len(rows), self.row_bucket)
        p = round_up(max(len(r) for r in rows), self.prompt_bucket)
        prompt = np.full((b, p), self.pad_id, np.int32)
        valid = np.zeros((b, p), bool)
        for i, r in enumerate(rows):
            prompt[i, p - len(r) :] = r
            valid[i, p - len(r) :] = True
        program, temperature, stop_ids = self._call_args(params)
        with jax.set_mesh(self.mesh):
            tokens, logps, lengths, stopped = self._program_fn(program)(
                nnx.state(self.model),
                put(prompt, self._rows_sharding),
                put(valid, self._rows_sharding),
                key,
                temperature,
                stop_ids,
                jnp.int32(first_row),
            )
        tokens, logps, lengths, stopped = fetch((tokens, logps, lengths, stopped))
        return self._completions(tokens, logps, lengths, stopped, len(rows), params)

    def _shared_programs(self) -> tuple[SharedPrefill, SegmentedDecode]:
        if self._shared is None:
            graphdef = nnx.graphdef(self.model)
            self._shared = (
                SharedPrefill(graphdef, self.cache_dtype),
                SegmentedDecode(
                    graphdef,
                    segment=self.decode_segment,
                    block=self.decode_block,
                    row_bucket=self.row_bucket,
                ),
            )
        return self._shared

    def _generate_shared(self, rows, params: SamplingParams, key, first_row: int):
        """The sharing path: distinct prompts and their common prefix prefilled once, then a
        decode that drops finished rows."""
        prefill, decode = self._shared_programs()
        distinct = list(dict.fromkeys(rows))
        index = {p: u for u, p in enumerate(distinct)}
        plan = plan_prefill(
            distinct, group_rows=self.row_bucket, bucket=self.prompt_bucket, pad_id=self.pad_id
        )
        b = round_up(len(rows), self.row_bucket)
        row_slot = np.zeros(b, np.int32)  # padding rows take slot 0 and are done from the start
        row_slot[: len(rows)] = plan.slot_of[[index[r] for r in rows]]
        done = np.arange(b) >= len(rows)
        program, temperature, stop_ids = self._call_args(params)
        state = nnx.state(self.model)
        with jax.set_mesh(self.mesh):
            cache, last = prefill(
                state,
                plan,
                self._put_rows(row_slot),
                params.max_tokens,
                self._put_rows,
                lambda x: put(x, self._replicated),
            )
            tokens, logps, lengths, stopped = decode(
                state, cache, last, first_row + np.arange(b), done, key, temperature, stop_ids,
                sampling=program, prompt_slots=plan.prompt_slots, put_rows=self._put_rows,
            )  # fmt: skip
        return self._completions(tokens, logps, lengths, stopped, len(rows), params)

    def _put_rows(self, x: np.ndarray):
        return put(x, self._rows_sharding)

    def _completions(self, tokens, logps, lengths, stopped, rows: int, params) -> list[Completion]:
        return [
            self._completion(
                tokens[i, : lengths[i]], logps[i, : lengths[i]], bool(stopped[i]), params
            )
            for i in range(rows)
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
