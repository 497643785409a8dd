"""Rollouts -> the padded arrays a train step consumes.

Layout of one training sequence (B rows, P prompt slots, R response slots):

    input_ids [B, P+R] = [ pad ... pad prompt | response pad ... pad ]
                           left-padded to P     right-padded to R

so the last prompt token always sits at column P-1 and response token j at column P+j; the
hidden state at column P-1+j predicts response token j. Response-level arrays are [B, R].
Padding widths are rounded up to buckets (`round_up`) so that a run compiles a handful of
step programs, not one per batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from tango_jax.parallel.buckets import round_up


@dataclasses.dataclass(frozen=True)
class TrainBatch:
    """Host arrays for one optimiser step (NumPy; the trainer shards them onto the mesh).

    input_ids: int32 [B, P+R]; attention_mask: bool [B, P+R] real tokens;
    response_mask: float32 [B, R] response tokens that carry loss;
    advantages: float32 [B, R] (zeros for SFT);
    sample_weights: float32 [B] per-sequence loss weights (the verifier's class weights; ones);
    sampler_logprobs: float32 [B, R] log-probs the sampler reported (zeros if unknown);
    truncated: float32 [B] 1 where the completion was cut at max_tokens without an EOS (the
    sampler's finish reason "length"; zeros if unknown), for `LossConfig.mask_truncated`.
    """

    input_ids: np.ndarray
    attention_mask: np.ndarray
    response_mask: np.ndarray
    advantages: np.ndarray
    sample_weights: np.ndarray
    sampler_logprobs: np.ndarray
    truncated: np.ndarray

    @property
    def prompt_len(self) -> int:
        return self.input_ids.shape[1] - self.response_mask.shape[1]

    @property
    def size(self) -> int:
        return self.input_ids.shape[0]

    def arrays(self) -> dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def select(self, rows: np.ndarray) -> TrainBatch:
        return TrainBatch(**{k: v[rows] for k, v in self.arrays().items()})


def make_batch(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    advantages: Sequence[Sequence[float]] | Sequence[float] | None = None,
    sample_weights: Sequence[float] | None = None,
    sampler_logprobs: Sequence[Sequence[float]] | None = None,
    loss_masks: Sequence[Sequence[float] | None] | None = None,
    truncated: Sequence[bool] | None = None,
    pad_id: int = 0,
    prompt_bucket: int = 16,
    response_bucket: int = 16,
    max_prompt_len: int | None = None,
    max_response_len: int | None = None,
) -> TrainBatch:
    """Pads rows of (prompt ids, response ids) into a TrainBatch.

    `advantages` per row is a scalar (broadcast over the response tokens) or one value per
    response token. `loss_masks` per row (None: all ones) is one 0/1 value per response token:
    its zeros are response tokens the model sees but is not trained on (`response_mask` 0
    there; the SFT of unlabelled step judgments). `truncated` per row (None: none) marks
    completions cut at max_tokens. Prompts longer than `max_prompt_len` raise
    (truncating the left of a prompt silently would change the task); responses are already
    bounded by the sampler's max_tokens.
    """
    n = len(prompts)
    if len(responses) != n:
        raise ValueError(f"{n} prompts but {len(responses)} responses; they must pair up.")
    p_len = round_up(max(len(p) for p in prompts), prompt_bucket)
    r_len = round_up(max(max((len(r) for r in responses), default=1), 1), response_bucket)
    if max_prompt_len is not None:
        longest = max(len(p) for p in prompts)
        if longest > max_prompt_len:
            raise ValueError(
                f"a prompt has {longest} tokens, more than max_prompt_len ({max_prompt_len}); "
                "raise the limit or filter long prompts when loading the data."
            )
        p_len = min(p_len, round_up(max_prompt_len, 1))
    if max_response_len is not None:
        r_len = min(r_len, max(max_response_len, max(len(r) for r in responses)))
    ids = np.full((n, p_len + r_len), pad_id, np.int32)
    attn = np.zeros((n, p_len + r_len), bool)
    resp_mask = np.zeros((n, r_len), np.float32)
    adv = np.zeros((n, r_len), np.float32)
    lps = np.zeros((n, r_len), np.float32)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, p_len - len(p) : p_len] = p
        attn[i, p_len - len(p) : p_len] = True
        ids[i, p_len : p_len + len(r)] = r
        attn[i, p_len : p_len + len(r)] = True
        resp_mask[i, : len(r)] = 1.0
        if loss_masks is not None and loss_masks[i] is not None:
            if len(loss_masks[i]) != len(r):
                raise ValueError(
                    f"loss_masks[{i}] has {len(loss_masks[i])} values for a {len(r)}-token "
                    "response; give one per response token."
                )
            resp_mask[i, : len(r)] = np.asarray(loss_masks[i], np.float32)
        if advantages is not None:
            a = np.asarray(advantages[i], np.float32)
            adv[i, : len(r)] = a if a.ndim == 0 else a[: len(r)]
        if sampler_logprobs is not None:
            lps[i, : len(r)] = np.asarray(sampler_logprobs[i], np.float32)[: len(r)]
    weights = (
        np.ones((n,), np.float32)
        if sample_weights is None
        else np.asarray(sample_weights, np.float32)
    )
    cut = np.zeros((n,), np.float32) if truncated is None else np.asarray(truncated, np.float32)
    if cut.shape != (n,):
        raise ValueError(f"`truncated` has shape {cut.shape} for {n} rows; give one flag per row.")
    return TrainBatch(ids, attn, resp_mask, adv, weights, lps, cut)
