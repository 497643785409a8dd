"""The train step with LoRA: only the adapters train (optimizer state adapter-shaped, base
weights bit-for-bit unchanged, a bf16 base), the KL reference is the initial policy, and the
embedded sampler shares the updated adapters."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from lora_trainer import LORA, lora_batch, lora_trainer, write_base

from tango_jax.models.tokenizer import tiny_tokenizer
from tango_jax.rollout.base import Prompt, SamplingParams
from tango_jax.rollout.jax_sampler import JaxSampler


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(trainer, base state before, first step's metrics) after two LoRA steps with the KL
    term on."""
    trainer = lora_trainer(write_base(tmp_path_factory.mktemp("lora") / "base"))
    base = jax.device_get(nnx.state(trainer.model, nnx.Not(nnx.LoRAParam)))
    first, _ = trainer.step(lora_batch(1))
    trainer.step(lora_batch(2))
    return trainer, base, first


def test_only_adapters_train_and_the_optimizer_holds_adapter_shaped_state(trained):
    trainer, base, first = trained
    assert trainer.traces == 1
    adapter_shapes = {x.shape for x in jax.tree.leaves(nnx.state(trainer.model, nnx.LoRAParam))}
    opt_arrays = [x for x in jax.tree.leaves(trainer.opt_state) if x.ndim]
    assert opt_arrays and {x.shape for x in opt_arrays} <= adapter_shapes
    n_adapters = len(jax.tree.leaves(trainer.params))
    assert n_adapters == 2 * len(LORA.targets) * trainer.model.config.num_layers  # A and B
    assert len(opt_arrays) == 2 * n_adapters  # AdamW's mu and nu, nothing for the base
    now = jax.device_get(nnx.state(trainer.model, nnx.Not(nnx.LoRAParam)))
    for before, after in zip(jax.tree.leaves(base), jax.tree.leaves(now)):
        assert before.dtype == jnp.bfloat16
        np.testing.assert_array_equal(before, after)  # frozen, bit for bit
    b = trainer.model.layers[0].attention.adapters["q"].lora_b[...]
    assert np.abs(np.asarray(b)).max() > 0  # the adapters moved off their zero start
    assert first["loss/kl"] == 0.0  # B = 0: the policy is its reference


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
