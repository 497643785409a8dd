"""One tiny LoRA trainer, shared by the trainer and checkpoint tests: the same model, LoRA and
trainer config and batch shapes compile the same train step, which the suite's persistent
compilation cache then compiles once for both files."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from hf_fixtures import VARIANTS, write_hf_checkpoint

from tango_jax.models import from_pretrained, save_pretrained
from tango_jax.models.lora import LoraConfig
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.rl.batch import TrainBatch, make_batch
from tango_jax.rl.train_step import LossConfig, OptimizerConfig, TrainerConfig
from tango_jax.rl.trainer import Trainer

LORA = LoraConfig(rank=4, alpha=8.0, targets=("q_proj", "v_proj", "o_proj", "down_proj"))
# The KL term on: its reference with LoRA is the initial adapters over the frozen base.
TRAIN = TrainerConfig(
    micro_batch_size=4,
    optimizer=OptimizerConfig(learning_rate=3e-2),
    loss=LossConfig(kl_coef=0.1),
)


def write_base(path: Path) -> Path:
    """A tiny Qwen2 HF checkpoint (float32 files) whose weights are bfloat16 values, so that
    a bfloat16 base loaded from it and transformers' float32 model of it are the same."""
    f32 = write_hf_checkpoint(path.with_name(path.name + "_f32"), **VARIANTS["qwen2_tied_gqa"])
    base = from_pretrained(f32, param_dtype=jnp.bfloat16)
    return save_pretrained(base, path, dtype=jnp.float32)


def lora_trainer(base: Path) -> Trainer:
    """A LoRA trainer on one device over a bfloat16 base, adapters fresh (B = 0)."""
    model = from_pretrained(base, lora=LORA, param_dtype=jnp.bfloat16)
    return Trainer(model, TRAIN, mesh=make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1]))


def lora_batch(seed: int) -> TrainBatch:
    """8 rows, always padded to [8, 8 + 8] (one compiled step), per-token advantages."""
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(2, 64, size=rng.integers(2, 9)).tolist() for _ in range(8)]
    responses = [rng.integers(2, 64, size=rng.integers(1, 9)).tolist() for _ in range(8)]
    adv = [rng.normal(size=len(r)).tolist() for r in responses]
    return make_batch(prompts, responses, advantages=adv, prompt_bucket=8, response_bucket=8)
