"""The one sampling protocol that both rollout backends implement.

`Sampler.generate(prompts, params)` turns prompts (token ids, plus text where known) into
`params.n` completions each; `Sampler.update_weights(params, version)` makes the sampler use new
model parameters. The embedded `JaxSampler` shares the trainer's arrays, so its update is a
pointer swap; the `VLLMSampler` streams the parameters into a separate vLLM server.

Nothing here knows about rewards, verifiers or Tango: `tango/` builds prompts and reads
completions, `rl/` turns them into arrays.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable


class FinishReason(enum.Enum):
    STOP = "stop"  # an EOS / stop token id or a stop string ended the completion
    LENGTH = "length"  # max_tokens was reached


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """What to sample. Mirrors vLLM's fields so the two backends read the same config.

    top_k = -1 and top_p = 1.0 disable those filters; temperature = 0 is greedy decoding.
    `stop` strings end a completion after the token that completes them (the stop string is
    kept in `text` and `token_ids`, as vLLM does with `include_stop_str_in_output=True`), so
    that training sees exactly the tokens the policy produced.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None

    def __post_init__(self):
        if self.n < 1:
            raise ValueError(f"SamplingParams.n ({self.n}) must be >= 1.")
        if self.temperature < 0:
            raise ValueError(
                f"SamplingParams.temperature ({self.temperature}) must be >= 0 (0 is greedy)."
            )
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"SamplingParams.top_p ({self.top_p}) must be in (0, 1].")
        if self.top_k == 0 or self.top_k < -1:
            raise ValueError(f"SamplingParams.top_k ({self.top_k}) must be -1 (off) or >= 1.")
        if self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens ({self.max_tokens}) must be >= 1.")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclasses.dataclass(frozen=True)
class Prompt:
    """A prompt as token ids; `text` is kept for logging and for servers that want it."""

    token_ids: tuple[int, ...]
    text: str | None = None

    def __post_init__(self):
        if len(self.token_ids) == 0:
            raise ValueError("Prompt.token_ids is empty: every prompt needs at least one token.")


@dataclasses.dataclass(frozen=True)
class Completion:
    """One sampled continuation.

    token_ids: the generated ids (no prompt, no padding); includes the EOS/stop token if one
      ended the completion.
    logprobs: log-probability of each generated token under the sampling distribution
      (logits / temperature, before top-p/top-k filtering), one per token id. Used for the
      sampler-vs-trainer drift metric and optional truncated importance sampling.
    weight_version: the version passed to the `update_weights` call whose parameters produced it.
    """

    token_ids: tuple[int, ...]
    text: str
    logprobs: tuple[float, ...]
    finish_reason: FinishReason
    weight_version: int


class WeightsHeldError(RuntimeError):
    """A sampler needed the trainer's current weights while they were held (`hold_weights`)."""


@runtime_checkable
class Sampler(Protocol):
    """Generates completions and accepts new weights."""

    weight_version: int

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        """`params.n` completions per prompt: `result[i][j]` is sample j of prompt i."""
        ...

    def update_weights(self, params: Any, version: int) -> dict[str, float]:
        """Makes later `generate` calls use `params` (an `nnx.State` of the model).

        Returns timing / size metrics of the update (empty for a sampler that shares arrays).
        """
        ...

    def hold_weights(self) -> AbstractContextManager[None]:
        """While held, the trainer is updating the model this sampler was last synced from
        (overlapped rollouts): a `generate` that would need to reload those weights (a
        restarted server) raises `WeightsHeldError` instead of reading them mid-update."""
        ...

    def metrics(self) -> dict[str, float]:
        """`rollout/...` counters since the sampler started (server restarts, retried prompts)
        and timings of the last call; empty for a sampler with nothing to count."""
        ...

    def close(self) -> None:
        """Releases servers, processes and device memory the sampler holds."""
        ...
