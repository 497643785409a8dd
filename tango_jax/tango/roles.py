"""A role bundles one model with what trains and samples it: the generator and the verifier are
two `Role`s built by the same code from their `RoleConfig`.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from jax.sharding import Mesh

from tango_jax.config import RoleConfig, SamplerBackend, VLLMSettings
from tango_jax.config_types import ConfigError
from tango_jax.data.tokenizer import load_tokenizer
from tango_jax.models import Transformer, from_pretrained
from tango_jax.models.config import dtype_from_name
from tango_jax.rl.trainer import Trainer
from tango_jax.rollout.base import Prompt, Sampler, SamplingParams
from tango_jax.rollout.jax_sampler import JaxSampler


@dataclasses.dataclass
class Role:
    name: str
    config: RoleConfig
    init_path: Path  # the HF checkpoint the run started from (after SFT, if any)
    model: Transformer
    tokenizer: Any
    trainer: Trainer | None  # None for a frozen verifier
    sampler: Sampler
    version: int = 0  # weight version: number of optimiser updates applied

    def encode(self, text: str) -> Prompt:
        """Plain text -> Prompt (no special tokens, no chat template, as the official code),
        right-truncated at `max_prompt_len` like the official verifier prompts (§3.1)."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return Prompt(tuple(ids[: self.config.max_prompt_len]), text)

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
        return SamplingParams(n=1, temperature=0.0, max_tokens=self.config.eval_max_tokens)

    def sync(self) -> dict[str, float]:
        """Make the sampler use the current weights (a no-op copy for the embedded sampler)."""
        from flax import nnx

        return self.sampler.update_weights(nnx.state(self.model), self.version)


def make_sampler(
    name: str, cfg: RoleConfig, model: Transformer, tokenizer, mesh: Mesh, init_path: Path
) -> Sampler:
    s = cfg.sampler
    if s.backend is SamplerBackend.JAX:
        return JaxSampler(
            model, tokenizer, mesh=mesh, max_rows=s.max_rows, prompt_bucket=s.prompt_bucket
        )
    return _vllm_sampler(s.vllm, model, init_path)


def _vllm_sampler(v: VLLMSettings, model: Transformer, init_path: Path) -> Sampler:
    """A VLLMSampler for `v`: launched servers serving `init_path`, or running ones at urls.
    Re-sends after a restart read the model's live state (see `state_provider`)."""
    from flax import nnx

    from tango_jax.rollout.vllm_sampler import VLLMSampler, VLLMSamplerConfig
    from tango_jax.rollout.vllm_server import VLLMServerConfig
    from tango_jax.rollout.weight_sync import WeightSyncConfig

    if v.devices and len(v.devices) != v.replicas:
        raise ConfigError(
            f"sampler.vllm.devices has {len(v.devices)} entries for "
            f"{v.replicas} replicas; give one CUDA_VISIBLE_DEVICES per replica."
        )
    servers = (
        ()
        if v.urls
        else tuple(
            VLLMServerConfig(
                model=str(init_path),
                host=v.host,
                port=v.port + i if v.port else 0,
                dtype=v.dtype,
                devices=v.devices[i] if v.devices else None,
                tensor_parallel_size=v.tensor_parallel_size,
                max_model_len=v.max_model_len,
                gpu_memory_utilization=v.gpu_memory_utilization,
                cpu_kv_cache_gib=v.cpu_kv_cache_gib,
                enforce_eager=v.enforce_eager,
                weight_transfer_backend=v.backend,
                api_key=v.api_key or None,
                extra_args=v.extra_args,
                startup_timeout_s=v.startup_timeout_s,
            )
            for i in range(v.replicas)
        )
    )
    config = VLLMSamplerConfig(
        servers=servers,
        urls=v.urls,
        api_key=v.api_key or None,
        sync=WeightSyncConfig(
            backend=v.backend,
            dtype=v.dtype,
            bucket_bytes=v.bucket_mb * 2**20,
            timeout_s=v.sync_timeout_s,
            master_address=v.master_address,
        ),
        request_timeout_s=v.request_timeout_s,
        max_concurrency=v.max_concurrency,
        max_restarts=v.max_restarts,
        verify_after_sync=v.verify_after_sync,
    )
    return VLLMSampler(config, model.config, state_provider=lambda: nnx.state(model))


def build_role(
    name: str, cfg: RoleConfig, init_path: Path, mesh: Mesh, *, with_trainer: bool
) -> Role:
    """Loads the model (sharded), its tokenizer, a frozen reference copy for the KL term (only
    when the loss uses one), the trainer and the sampler."""
    numerics = dict(dtype=dtype_from_name(cfg.dtype), param_dtype=dtype_from_name(cfg.param_dtype))
    model = from_pretrained(init_path, mesh=mesh, remat=cfg.remat, **numerics)
    tokenizer = load_tokenizer(init_path)
    trainer = None
    if with_trainer:
        loss = cfg.trainer.loss
        ref = from_pretrained(init_path, mesh=mesh, **numerics) if loss.kl_coef else None
        trainer = Trainer(model, cfg.trainer, mesh=mesh, ref_model=ref)
    sampler = make_sampler(name, cfg, model, tokenizer, mesh, init_path)
    return Role(name, cfg, init_path, model, tokenizer, trainer, sampler)
