"""ModelConfig.attention: the choice of kernel, its errors, and cuDNN's flash attention against
the XLA einsums (the GPU test runs only where JAX has an NVIDIA GPU; CI has none)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tango_jax.config_checks import FieldError
from tango_jax.config_roles import RoleConfig
from tango_jax.models import Transformer, presets
from tango_jax.models.transformer import use_cudnn

on_gpu = jax.default_backend() == "gpu"


def test_unknown_kernel_is_rejected_naming_the_field():
    with pytest.raises(ValueError, match=r"attention \('flash'\).*'auto', 'xla', 'cudnn'"):
        presets.get("tiny-qwen2", attention="flash")
    with pytest.raises(FieldError, match=r"attention \('flash'\) must be one of"):
        RoleConfig(attention="flash")


@pytest.mark.skipif(on_gpu, reason="the CPU behaviour")
def test_auto_is_xla_off_the_gpu_and_cudnn_there_is_an_error():
    bf16 = presets.get("tiny-qwen2", dtype=jnp.bfloat16)
    assert not use_cudnn(bf16, jnp.bfloat16)
    assert not use_cudnn(bf16.replace(attention="xla"), jnp.bfloat16)
    with pytest.raises(ValueError, match="attention='cudnn' needs an NVIDIA GPU.*backend cpu"):
        use_cudnn(bf16.replace(attention="cudnn"), jnp.bfloat16)


@pytest.mark.skipif(not on_gpu, reason="cuDNN flash attention needs an NVIDIA GPU")
def test_cudnn_matches_xla_with_padding_values_and_gradients():
    cfg = presets.get(
        "tiny-qwen2", dtype=jnp.bfloat16, embed_dim=256, num_heads=4, num_kv_heads=2, head_dim=64
    )
    assert use_cudnn(cfg, jnp.bfloat16) and not use_cudnn(cfg, jnp.float32)
    rng = np.random.default_rng(0)
    b, t = 4, 96
    tokens = jnp.asarray(rng.integers(2, cfg.vocab_size, size=(b, t)), jnp.int32)
    valid = np.ones((b, t), bool)
    valid[1, :17] = False  # left padding (a short prompt)
    valid[2, 70:] = False  # right padding (a short response)
    valid[3, :5] = valid[3, 90:] = False
    valid = jnp.asarray(valid)
    weights = jnp.asarray(rng.normal(size=(b, t)), jnp.float32) * valid

    def run(kernel):
        model = Transformer(cfg.replace(attention=kernel), rngs=nnx.Rngs(0))
        graphdef, params = nnx.split(model)

        def loss(p):
            h = nnx.merge(graphdef, p).hidden_states(tokens, attention_mask_BxT=valid)
            return jnp.sum(h.astype(jnp.float32).mean(-1) * weights), h

        (value, h), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
        return value, np.asarray(h, np.float32)[np.asarray(valid)], grads

    value_x, h_x, g_x = run("xla")
    value_c, h_c, g_c = run("cudnn")
    rel = np.linalg.norm(h_c - h_x) / np.linalg.norm(h_x)
    assert rel < 2e-2, rel  # bf16 operands: 1e-3 .. 1e-2
    np.testing.assert_allclose(value_c, value_x, rtol=5e-2, atol=5e-2)
    for gx, gc in zip(jax.tree.leaves(g_x), jax.tree.leaves(g_c)):
        gx, gc = np.asarray(gx, np.float32), np.asarray(gc, np.float32)
        assert np.all(np.isfinite(gc))
        assert np.linalg.norm(gc - gx) <= 3e-2 * np.linalg.norm(gx) + 1e-6


def test_the_kernel_choice_reaches_a_loaded_model(tmp_path):
    from tango_jax.models import from_pretrained
    from tango_jax.models.tiny import write_tiny_checkpoint

    path = write_tiny_checkpoint(tmp_path / "tiny", seed=0)
    assert from_pretrained(path).config.attention == "auto"
    assert from_pretrained(path, attention="xla").config.attention == "xla"
    with pytest.raises(ValueError, match="attention"):
        from_pretrained(path, attention="flash")
