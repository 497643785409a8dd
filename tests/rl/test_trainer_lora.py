"""The train step with LoRA: only the adapters train (optimizer state adapter-shaped, base
weights bit-for-bit unchanged, bf16 base allowed), the KL reference is the frozen base, and the
embedded sampler shares the updated adapters."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tango_jax.models import Transformer, presets
from tango_jax.models.lora import LoraConfig
from tango_jax.models.tokenizer import tiny_tokenizer
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.rl.batch import make_batch
from tango_jax.rl.train_step import LossConfig, OptimizerConfig, TrainerConfig
from tango_jax.rl.trainer import Trainer
from tango_jax.rollout.base import Prompt, SamplingParams
from tango_jax.rollout.jax_sampler import JaxSampler

LORA = LoraConfig(rank=4, alpha=8.0, targets=("q_proj", "v_proj", "o_proj", "down_proj"))
CONFIG = presets.get(
    "tiny-qwen2", vocab_size=64, embed_dim=64, mlp_dim=96, lora=LORA, param_dtype=jnp.bfloat16
)


def _batch(rows=8, seed=0):
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(2, 64, size=rng.integers(2, 9)).tolist() for _ in range(rows)]
    responses = [rng.integers(2, 64, size=rng.integers(1, 12)).tolist() for _ in range(rows)]
    return make_batch(
        prompts,
        responses,
        advantages=[rng.normal(size=len(r)).tolist() for r in responses],
        prompt_bucket=8,
        response_bucket=8,
    )


@pytest.fixture(scope="module")
def trained():
    """(trainer, base state before, first step's metrics) after two LoRA steps with the KL
    term on (reference: the frozen base)."""
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    model = Transformer(CONFIG, rngs=nnx.Rngs(0))
    cfg = TrainerConfig(
        micro_batch_size=4,
        optimizer=OptimizerConfig(learning_rate=3e-2),
        loss=LossConfig(kl_coef=0.1),
    )
    trainer = Trainer(model, cfg, mesh=mesh)  # no ref_model: LoRA's reference is the base
    base = jax.device_get(nnx.state(model, nnx.Not(nnx.LoRAParam)))
    first, _ = trainer.step(_batch(seed=3))
    trainer.step(_batch(seed=4))  # same bucketed shapes
    return trainer, base, first


def test_only_adapters_train_and_the_optimizer_holds_adapter_shaped_state(trained):
    trainer, base, first = trained
    assert trainer.traces == 1
    adapter_shapes = {x.shape for x in jax.tree.leaves(nnx.state(trainer.model, nnx.LoRAParam))}
    opt_arrays = [x for x in jax.tree.leaves(trainer.opt_state) if x.ndim]
    assert opt_arrays and {x.shape for x in opt_arrays} <= adapter_shapes
    n_adapters = len(jax.tree.leaves(trainer.params))
    assert n_adapters == 2 * 4 * CONFIG.num_layers  # A and B of 4 targets per layer
    assert len(opt_arrays) == 2 * n_adapters  # AdamW's mu and nu, nothing for the base
    now = jax.device_get(nnx.state(trainer.model, nnx.Not(nnx.LoRAParam)))
    for before, after in zip(jax.tree.leaves(base), jax.tree.leaves(now)):
        assert before.dtype == jnp.bfloat16
        np.testing.assert_array_equal(before, after)  # frozen, bit for bit
    b = trainer.model.layers[0].attention.adapters["q"].lora_b[...]
    assert np.abs(np.asarray(b)).max() > 0  # the adapters moved off their zero start
    assert first["loss/kl"] == 0.0  # zero adapters: the policy is its reference


def test_embedded_sampler_sees_the_updated_adapters(trained):
    """The sampler's log-probs of its own completions equal the trainer's forward with the
    adapters (and differ from the frozen base's)."""
    trainer, _, _ = trained
    model = trainer.model
    sampler = JaxSampler(model, tiny_tokenizer(), mesh=trainer.mesh, prompt_bucket=8)
    prompts = [[5, 9, 13, 2], [7, 3, 22]]
    out = sampler.generate([Prompt(tuple(p)) for p in prompts], SamplingParams(max_tokens=6))
    completions = [c for (c,) in out]
    rows = [p + list(c.token_ids) for p, c in zip(prompts, completions)]
    width = max(map(len, rows))
    ids = np.array([r + [0] * (width - len(r)) for r in rows], np.int32)
    mask = np.array([[1] * len(r) + [0] * (width - len(r)) for r in rows], bool)
    logp = jax.jit(
        lambda params, frozen, ids, mask: jax.nn.log_softmax(
            nnx.merge(trainer.graphdef, params, frozen)(ids, attention_mask_BxT=mask)
        )
    )
    zero = jax.tree.map(jnp.zeros_like, trainer.params)
    adapted, base = (np.asarray(logp(p, trainer.frozen, ids, mask)) for p in (trainer.params, zero))
    for i, (p, c) in enumerate(zip(prompts, completions)):
        at = np.arange(len(p) - 1, len(p) - 1 + len(c.token_ids))
        np.testing.assert_allclose(c.logprobs, adapted[i, at, c.token_ids], rtol=1e-4, atol=1e-4)
        assert np.abs(base[i, at, c.token_ids] - c.logprobs).max() > 1e-3  # adapters matter
