"""ModelConfig.attention: the choice of kernel, its errors, and cuDNN's flash attention against
the XLA einsums (the GPU test runs only where JAX has an NVIDIA GPU; CI has none)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tango_jax.config.roles import RoleConfig
from tango_jax.models import Transformer, presets
from tango_jax.models.transformer import attention_block, use_cudnn
from tango_jax.schema import FieldError

on_gpu = jax.default_backend() == "gpu"


def test_unknown_kernel_is_rejected_naming_the_field():
    with pytest.raises(ValueError, match=r"attention \('flash'\).*'auto', 'xla', 'xla_blocked'"):
        presets.get("tiny-qwen2", attention="flash")
    with pytest.raises(FieldError, match=r"attention \('flash'\) must be one of"):
        RoleConfig(attention="flash")


@pytest.mark.skipif(on_gpu, reason="the CPU behaviour")
def test_auto_is_not_cudnn_off_the_gpu_and_cudnn_there_is_an_error():
    bf16 = presets.get("tiny-qwen2", dtype=jnp.bfloat16)
    assert not use_cudnn(bf16, jnp.bfloat16)
    assert not use_cudnn(bf16.replace(attention="xla"), jnp.bfloat16)
    assert not use_cudnn(bf16.replace(attention="xla_blocked"), jnp.bfloat16)
    with pytest.raises(ValueError, match="attention='cudnn' needs an NVIDIA GPU.*backend cpu"):
        use_cudnn(bf16.replace(attention="cudnn"), jnp.bfloat16)


def test_blocked_attention_block_sizes():
    cfg = presets.get("tiny-qwen2")
    blocked, plain = cfg.replace(attention="xla_blocked"), cfg.replace(attention="xla")
    lengths = (1, 64, 65, 160, 1024, 1025, 4096)
    # 64-token blocks, at most 16 of them
    assert [attention_block(blocked, t) for t in lengths] == [0, 0, 64, 64, 64, 128, 256]
    assert attention_block(plain, 4096) == 0
    auto_blocks = jax.default_backend() == "cpu"  # auto: xla_blocked on CPUs, cudnn or xla else
    assert attention_block(cfg, 160) == (64 if auto_blocks else 0)


def _hidden_and_grads(cfg, kernel, tokens, valid, weights):
    model = Transformer(cfg.replace(attention=kernel), rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)

    def loss(p):
        h = nnx.merge(graphdef, p).hidden_states(tokens, attention_mask_BxT=valid)
        return jnp.sum(h.astype(jnp.float32).mean(-1) * weights), h

    (value, h), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    return value, np.asarray(h, np.float32)[np.asarray(valid)], grads


def _padded_batch(cfg, b, t, seed=0):
    rng = np.random.default_rng(seed)
    tokens = jnp.asarray(rng.integers(2, cfg.vocab_size, size=(b, t)), jnp.int32)
    valid = np.ones((b, t), bool)
    valid[1, :17] = False  # left padding (a short prompt)
    valid[2, 70:] = False  # right padding (a short response)
    valid[3, :5] = valid[3, 90:] = False
    valid = jnp.asarray(valid)
    weights = jnp.asarray(rng.normal(size=(b, t)), jnp.float32) * valid
    return tokens, valid, weights


def test_blocked_matches_xla_with_padding_values_and_gradients():
    # 150 tokens: blocks of 64, 64 and 22 queries; grouped-query heads (4 query, 2 kv)
    cfg = presets.get("tiny-qwen2", embed_dim=128, num_heads=4, num_kv_heads=2, head_dim=32)
    tokens, valid, weights = _padded_batch(cfg, 4, 150)
    value_x, h_x, g_x = _hidden_and_grads(cfg, "xla", tokens, valid, weights)
    value_b, h_b, g_b = _hidden_and_grads(cfg, "xla_blocked", tokens, valid, weights)
    np.testing.assert_allclose(h_b, h_x, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(value_b, value_x, rtol=1e-5, atol=1e-5)
    for gx, gb in zip(jax.tree.leaves(g_x), jax.tree.leaves(g_b)):
        np.testing.assert_allclose(np.asarray(gb), np.asarray(gx), rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(not on_gpu, reason="cuDNN flash attention needs an NVIDIA GPU")
def test_cudnn_matches_xla_with_padding_values_and_gradients():
    cfg = presets.get(
        "tiny-qwen2", dtype=jnp.bfloat16, embed_dim=256, num_heads=4, num_kv_heads=2, head_dim=64
    )
    assert use_cudnn(cfg, jnp.bfloat16) and not use_cudnn(cfg, jnp.float32)
    tokens, valid, weights = _padded_batch(cfg, 4, 96)

    value_x, h_x, g_x = _hidden_and_grads(cfg, "xla", tokens, valid, weights)
    value_c, h_c, g_c = _hidden_and_grads(cfg, "cudnn", tokens, valid, weights)
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
