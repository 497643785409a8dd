"""A role bundles one model with what trains and samples it: the generator and the verifier are
two `Role`s built by the same code from their `RoleConfig`.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flax import nnx

from tango_jax.config.roles import RoleConfig, SamplerBackend
from tango_jax.models import ModelConfig, Transformer, from_pretrained, read_config
from tango_jax.models.peft import load_peft_adapter
from tango_jax.models.tokenizer import load_tokenizer
from tango_jax.rl.trainer import Trainer
from tango_jax.rollout.base import Completion, Prompt, Sampler, SamplingParams
from tango_jax.rollout.jax_sampler import JaxSampler
from tango_jax.tango.kind import Kind
from tango_jax.text.templates import chat_prompt

if TYPE_CHECKING:
    from jax.sharding import Mesh  # passed through to the model, trainer and sampler


@dataclasses.dataclass
class Role:
    kind: Kind
    config: RoleConfig
    init_path: Path  # the HF checkpoint the run started from (after SFT, if any)
    model: Transformer | None  # None: a frozen role served by vLLM needs no JAX copy
    tokenizer: Any
    trainer: Trainer | None  # None for a frozen verifier
    sampler: Sampler
    version: int = 0  # weight version: number of optimiser updates applied

    @property
    def name(self) -> str:
        """ "generator" or "verifier": the prefix of its metrics and config fields."""
        return self.kind.value

    def model_text(self, text: str) -> str:
        """The prompt text as this role's model sees it: unchanged, or with `chat_template` on,
        as the user turn of the tokenizer's chat template (special tokens as text)."""
        return chat_prompt(text, self.tokenizer) if self.config.chat_template else text

    def encode(self, text: str, *, truncate: bool = False) -> Prompt:
        """Prompt text -> Prompt: the text as it is (no special tokens, as the official code),
        or, with `chat_template` on, as the user turn of the tokenizer's chat template.

        `truncate`: right-truncate at `max_prompt_len`, as the official code does with verifier
        prompts (§3.1, §10.10). Otherwise a longer prompt is an error: generator prompts are
        filtered by length when the data loads (`filter_overlong_prompts`), so one that is
        still too long is a bug, not something to cut silently.
        """
        text = self.model_text(text)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) > self.config.max_prompt_len:
            if not truncate:
                raise ValueError(
                    f"{self.name} prompt of {len(ids)} tokens exceeds {self.name}.max_prompt_len "
                    f"({self.config.max_prompt_len}); raise it or filter the data."
                )
            ids = ids[: self.config.max_prompt_len]
        return Prompt(tuple(ids), text)

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        """`sampler.generate`, with each completion's text made `tokenizer.decode(token_ids,
        skip_special_tokens=True)`: step boundaries are found in this text and step rewards
        placed by character offsets of the same decoding (`rewards.token_char_ends`), so the
        text must come from our tokenizer, not from a server's own detokeniser (vLLM's can
        differ in spacing around added tokens or stop strings)."""
        out = self.sampler.generate(prompts, params)
        flat = [c for per_prompt in out for c in per_prompt]
        texts = self.tokenizer.batch_decode(
            [list(c.token_ids) for c in flat], skip_special_tokens=True
        )
        fixed = iter(
            [c if t == c.text else dataclasses.replace(c, text=t) for c, t in zip(flat, texts)]
        )
        return [[next(fixed) for _ in per_prompt] for per_prompt in out]

    def train_params(self, seed: int | None, *, n: int | None = None) -> SamplingParams:
        r = self.config.rollout
        return SamplingParams(
            n=r.n if n is None else n,
            temperature=r.temperature,
            top_p=r.top_p,
            top_k=r.top_k,
            max_tokens=r.max_tokens,
            seed=seed,
        )

    def eval_params(self) -> SamplingParams:
        budget = self.config.eval_max_tokens or self.config.rollout.max_tokens
        return SamplingParams(n=1, temperature=0.0, max_tokens=budget)

    def sync(self) -> dict[str, float]:
        """Make the sampler use the current weights (a no-op copy for the embedded sampler)."""
        return self.sampler.update_weights(nnx.state(self.model), self.version)


def make_sampler(
    cfg: RoleConfig,
    model: Transformer | None,
    model_config: ModelConfig,
    tokenizer,
    mesh: Mesh,
    init_path: Path,
    *,
    start: bool = True,
) -> Sampler:
    """The role's sampler; start=False leaves a vLLM sampler's servers to `start_samplers`."""
    s = cfg.sampler
    if s.backend is SamplerBackend.JAX:
        return JaxSampler(
            model,
            tokenizer,
            mesh=mesh,
            max_rows=s.max_rows,
            prompt_bucket=s.prompt_bucket,
            decode_block=s.decode_block,
            share_prefix=s.share_prefix,
        )
    return _vllm_sampler(cfg, model, model_config, init_path, start=start)


def _vllm_sampler(
    cfg: RoleConfig,
    model: Transformer | None,
    model_config: ModelConfig,
    init_path: Path,
    *,
    start: bool = True,
) -> Sampler:
    """A VLLMSampler: launched servers serving `init_path`, or running ones at urls.

    Re-sends after a server restart read the model's live state (`state_provider`): every
    update is followed by a sync, so the live state is the last synced version, whereas the
    arrays of that sync have been donated to the next train step. A frozen role (model None)
    is never synced.
    """
    from tango_jax.rollout.vllm.sampler import VLLMSampler

    config = cfg.sampler.vllm.sampler_config(str(init_path), cfg.max_sequence_len)
    provider = None if model is None else (lambda: nnx.state(model))
    return VLLMSampler(config, model_config, state_provider=provider, start=start)


def build_role(
    kind: Kind,
    cfg: RoleConfig,
    init_path: Path,
    mesh: Mesh,
    *,
    with_trainer: bool,
    start_sampler: bool = True,
) -> Role:
    """Loads the model (sharded), its tokenizer, a frozen reference copy for the KL term (only
    when the loss uses one and the role has no LoRA adapters, whose reference is the frozen
    base), the trainer and the sampler. A frozen role sampled by vLLM loads no JAX parameters
    at all. start_sampler=False: a vLLM sampler's servers are started by `start_samplers`."""
    numerics = dict(cfg.model_numerics(), lora=cfg.lora)
    tokenizer = load_tokenizer(init_path)
    model = None
    if with_trainer or cfg.sampler.backend is SamplerBackend.JAX:
        model = from_pretrained(init_path, mesh=mesh, remat=cfg.remat, **numerics)
        if cfg.lora.init_from:  # before the trainer: its KL reference is the initial policy
            load_peft_adapter(model, cfg.lora.init_from)
    model_config = model.config if model is not None else read_config(init_path, **numerics)
    trainer = None
    if with_trainer:
        separate_ref = cfg.trainer.loss.kl_coef and not cfg.lora.enabled
        ref = from_pretrained(init_path, mesh=mesh, **numerics) if separate_ref else None
        trainer = Trainer(model, cfg.trainer, mesh=mesh, ref_model=ref)
    sampler = make_sampler(
        cfg, model, model_config, tokenizer, mesh, init_path, start=start_sampler
    )
    return Role(kind, cfg, init_path, model, tokenizer, trainer, sampler)


def start_samplers(roles: Iterable[Role]) -> None:
    """Starts the roles' unstarted vLLM samplers at the same time: each launches its servers
    and waits for them to load the model (seconds for a tiny model, minutes for a 7B one), so
    the generator's and the verifier's servers come up side by side instead of one after the
    other. If any fails, every role's sampler is closed (no server is left running) and the
    first error is raised."""
    roles = list(roles)
    pending = [r.sampler for r in roles if getattr(r.sampler, "started", True) is False]
    if not pending:
        return
    with cf.ThreadPoolExecutor(len(pending)) as pool:
        futures = [pool.submit(sampler.start) for sampler in pending]
        errors = [f.exception() for f in futures]  # waits for all of them
    failed = [e for e in errors if e is not None]
    if failed:
        for r in roles:
            r.sampler.close()
        raise failed[0]
