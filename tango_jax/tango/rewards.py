r"""Tango's rewards: the outcome reward, step rewards, the verifier reward, and where they land.

TANGO_SPEC.md §2.1-2.2 and §3.3 define them:

  * outcome reward r_out in {0, 1}: an answer check (`answer_check`: Math-Verify for math, the
    reference checks for the OOD benchmarks), scored in batches by `scoring_pool.OutcomeScorer`
    under per-item time limits;
  * step rewards ±1/K, only when the verifier gave exactly K step judgments;
  * verifier reward 1[verdict == r_out] + 0.8 · format, 0 when the verdict is unparsable.

This module holds the formulas and the step-reward token positions, and re-exports the public
names of `answer_check` and `scoring_pool`, so `from tango_jax.tango import rewards` is the one
import the loop needs.

Step-reward positions. The official code decodes the response, re-tokenises the text with
offsets, and puts step k's reward on the token containing the character just after `</step>`
(usually the next token, a newline). Re-tokenisation need not reproduce the generated ids, so
tango_jax (TANGO_SPEC §11) maps each step to the generated token that completes its `</step>`,
using character offsets of the generator's own token ids (`token_char_ends`,
`step_end_token_indices`). The reward then sits on a token the policy actually produced, at the
moment the step is complete; the reverse cumulative sum of step advantages credits that token and
everything before it.
"""

from __future__ import annotations

import bisect
import codecs
import functools
from collections.abc import Sequence

from tango_jax.text import formats
from tango_jax.text.answer_check import (
    DEFAULT_TIMEOUT_S,
    RewardKind,
    boxed_equal_reward,
    cruxeval_reward,
    outcome_reward,
)
from tango_jax.text.scoring_pool import OutcomeScorer, ScoredBatch, ScorerStats

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "VERIFIER_FORMAT_WEIGHT",
    "OutcomeScorer",
    "RewardKind",
    "ScoredBatch",
    "ScorerStats",
    "boxed_equal_reward",
    "cruxeval_reward",
    "outcome_reward",
    "step_end_token_indices",
    "step_rewards",
    "token_char_ends",
    "verifier_reward",
]

INCORRECT_STEP = -1  # a step judgment of INCORRECT (formats.Verification)
VERIFIER_FORMAT_WEIGHT = 0.8  # γ in r_v = 1[verdict == gold] + γ · format


# --------------------------------------------------------------------------------------------
# Step rewards and the verifier reward (TANGO_SPEC §2.2, §3.3).


def step_rewards(num_steps: int, judgments: Sequence[int]) -> list[float] | None:
    """The step rewards of a response with `num_steps` (K) steps: judgment_k / K for each step,
    or None (no step rewards at all, no partial alignment) unless K > 0 and the verifier gave
    exactly K judgments (each +1 or -1, from `parse_verification`)."""
    if num_steps < 0:
        raise ValueError(f"num_steps ({num_steps}) must be >= 0.")
    if any(j not in (1, -1) for j in judgments):
        raise ValueError(f"judgments {tuple(judgments)} must each be +1 or -1.")
    if num_steps == 0 or len(judgments) != num_steps:
        return None
    return [j / num_steps for j in judgments]


def verifier_reward(
    verification: formats.Verification,
    *,
    solution_correct: bool,
    format_score: float,
    format_weight: float = VERIFIER_FORMAT_WEIGHT,
    consistent_verdict: bool = False,
) -> float:
    """r_v = 1[verdict == solution_correct] + format_weight · format_score, in [0, 1.8]; exactly
    0 when the verdict is unparsable (then the format score does not count either).

    solution_correct: the rule-based outcome of the verified solution (r_out > 0.5).
    format_score: `formats.verifier_format_score` of the verifier output, in [0, 1].
    consistent_verdict: the verdict term counts only when the step judgments agree with the
        verdict (some step INCORRECT exactly when the verdict is INCORRECT; no judgments never
        agree). Still an outcome-level reward (no step labels); off in the paper, whose
        verifiers are consistent by themselves (`AlgorithmConfig.verifier_consistent_verdict`).
    """
    if not 0.0 <= format_score <= 1.0:
        raise ValueError(
            f"format_score ({format_score}) must be in [0, 1] (formats.verifier_format_score)."
        )
    if verification.verdict is None:
        return 0.0
    right = verification.verdict == int(solution_correct)
    if consistent_verdict:
        judged = verification.step_judgments
        right = right and bool(judged) and (INCORRECT_STEP in judged) == (verification.verdict == 0)
    return float(right) + format_weight * format_score


# --------------------------------------------------------------------------------------------
# Token positions of the step ends.


@functools.cache
def _byte_of_char() -> dict[str, int]:
    """The inverse of GPT-2's byte -> printable-character table used by byte-level BPE
    (Qwen2, Llama 3): printable Latin-1 bytes stand for themselves, the other 68 bytes for the
    characters 256, 257, ... in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    others = [b for b in range(256) if b not in printable]
    table = {chr(b): b for b in printable}
    table.update({chr(256 + i): b for i, b in enumerate(others)})
    return table


def _special_ids(tokenizer) -> set[int]:
    added = getattr(tokenizer, "added_tokens_decoder", {})
    return set(tokenizer.all_special_ids) | {i for i, t in added.items() if t.special}


def _byte_level_pieces(tokenizer, token_ids: list[int]) -> list[bytes]:
    """The bytes each token adds to the decoded text, read as byte-level BPE does: a token whose
    characters are all in the byte table stands for those bytes, any other token (an added token
    such as `<think>` with a space) for its own UTF-8; special tokens add nothing."""
    table, special = _byte_of_char(), _special_ids(tokenizer)
    pieces = []
    for tid, tok in zip(token_ids, tokenizer.convert_ids_to_tokens(token_ids)):
        if tok is None or tid in special:
            pieces.append(b"")
            continue
        try:
            pieces.append(bytes([table[c] for c in tok]))
        except KeyError:
            pieces.append(tok.encode("utf-8"))
    return pieces


def _char_ends_from_bytes(pieces: list[bytes]) -> tuple[list[int], str]:
    """Char ends by incremental UTF-8 decoding: a character counts once all its bytes are in, so
    it lands on the token that completes it; invalid bytes count as U+FFFD where they become
    invalid, and an incomplete tail as one U+FFFD on the last token (as a lossy decode does)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    chunks, ends, n = [], [], 0
    for piece in pieces:
        chunk = decoder.decode(piece)
        chunks.append(chunk)
        n += len(chunk)
        ends.append(n)
    tail = decoder.decode(b"", final=True)
    if tail and ends:
        chunks.append(tail)
        ends[-1] += len(tail)
    return ends, "".join(chunks)


def _windowed_char_ends(tokenizer, ids: list[int], text: str) -> list[int]:
    """Char ends for tokenizers that are not byte-level (SentencePiece, WordPiece): incremental
    detokenisation over short windows, as vLLM does, two small decodes per token. A window whose
    text ends in U+FFFD waits for the token that completes the character."""

    def decode(lo: int, hi: int) -> str:
        return tokenizer.decode(ids[lo:hi], skip_special_tokens=True)

    ends, emitted, prefix, read = [], 0, 0, 0
    for i in range(len(ids)):
        old, new = decode(prefix, read), decode(prefix, i + 1)
        if len(new) > len(old) and not new.endswith("\ufffd"):
            emitted += len(new) - len(old)
            prefix, read = read, i + 1
        ends.append(min(emitted, len(text)))
    if ends:
        ends[-1] = len(text)
    return ends


def token_char_ends(tokenizer, token_ids: Sequence[int]) -> list[int]:
    """For each generated token, the character offset just after it in
    `tokenizer.decode(token_ids, skip_special_tokens=True)`.

    [T] ints, non-decreasing, the last equal to the length of the decoded text. Special tokens
    add 0 characters. A character whose UTF-8 bytes are spread over several byte-level tokens
    counts at the token that completes it: text[:char_ends[i]] is exactly the part of the text
    that tokens 0..i have fixed.

    Byte-level BPE tokenizers (Qwen2/2.5, Llama 3, GPT-2) take an O(T) path: one
    convert_ids_to_tokens, one decode to check the result against, and an incremental UTF-8
    decode (about 5 ms for 4096 tokens). Other tokenizers, or a decode that does more than join
    bytes (clean-up of spaces), fall back to windowed decoding (two short decodes per token).
    """
    ids = [int(t) for t in token_ids]
    text = tokenizer.decode(ids, skip_special_tokens=True)
    ends, fast_text = _char_ends_from_bytes(_byte_level_pieces(tokenizer, ids))
    if fast_text == text:
        return ends
    return _windowed_char_ends(tokenizer, ids, text)


def step_end_token_indices(steps: Sequence[formats.Step], char_ends: Sequence[int]) -> list[int]:
    """For each step, the index of the generated token that completes its closing `</step>`:
    the first token whose char end is >= step.end.

    steps: `formats.split_steps` of the decoded response. char_ends: `token_char_ends` of the
    same token ids ([T], non-decreasing). A step end past the last char end (text and ids that
    do not belong together) is clamped to the last token, as the official code clamps to the
    last valid token. The official code instead rewards the token holding the character just
    after `</step>` in a re-tokenisation of the text (TANGO_SPEC §2.2, §10.4, §11).
    """
    if not len(char_ends):
        if steps:
            raise ValueError(f"{len(steps)} steps but no tokens: pass the response's char ends.")
        return []
    last = len(char_ends) - 1
    return [min(bisect.bisect_left(char_ends, step.end), last) for step in steps]
