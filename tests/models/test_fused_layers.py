"""ModelConfig.fused_norm / fused_mlp / fused_rope against the unfused layers they replace
(the reference: the same module with the flag off, itself checked against transformers in
test_models.py): values and gradients in float32 at tight tolerances, whole models with
padding, remat and a KV cache, a mesh with tensor parallelism, and transformers' logits."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from hf_fixtures import TOL, VARIANTS, load_hf, rel_err, write_hf_checkpoint

from tango_jax.models import KVCache, Transformer, from_pretrained, presets
from tango_jax.models.transformer import (
    MLP,
    RMSNorm,
    apply_rope,
    apply_rope_tables,
    rope_inv_freq,
    rope_tables,
)
from tango_jax.parallel.mesh import MeshConfig, make_mesh

ALL = dict(fused_norm=True, fused_mlp=True, fused_rope=True)


def _rng_normal(shape, seed=0, dtype=jnp.float32):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), dtype)


def _module_pair(cls, cfg, flag, **kw):
    """(unfused, fused) modules with the same (random, non-trivial) parameters."""
    with nnx.use_eager_sharding(False):  # logical axis names only, as Transformer builds them
        plain = cls(cfg, rngs=nnx.Rngs(0), **kw)
        fused = cls(cfg.replace(**{flag: True}), rngs=nnx.Rngs(0), **kw)
    state = jax.tree.map(lambda p: p + _rng_normal(p.shape, 7) * 0.3, nnx.state(plain))
    nnx.update(plain, state)
    nnx.update(fused, state)
    return plain, fused


def _value_and_grads(module, x, weights):
    graphdef, state = nnx.split(module)

    def loss(state, x):
        y = nnx.merge(graphdef, state)(x)
        return jnp.sum(y.astype(jnp.float32) * weights), y

    (_, y), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1), has_aux=True))(state, x)
    return y, jax.tree.leaves(grads)


def _assert_same_values_and_grads(plain, fused, x, rtol=1e-5):
    weights = _rng_normal(x.shape, 3)
    y0, g0 = _value_and_grads(plain, x, weights)
    y1, g1 = _value_and_grads(fused, x, weights)
    np.testing.assert_allclose(np.asarray(y1), np.asarray(y0), rtol=1e-6, atol=1e-6)
    assert len(g0) == len(g1)
    for a, b in zip(g0, g1):
        assert rel_err(b, a) <= rtol, rel_err(b, a)


@pytest.mark.parametrize("per_head", [False, True], ids=["model_width", "per_head"])
def test_fused_rms_norm_values_and_gradients(per_head):
    cfg = presets.get("tiny-qwen2", embed_dim=48, head_dim=16)
    plain, fused = _module_pair(RMSNorm, cfg, "fused_norm", per_head=per_head)
    shape = (3, 5, 4, 16) if per_head else (3, 5, 48)
    _assert_same_values_and_grads(plain, fused, _rng_normal(shape) * 2 + 0.5)


def test_fused_rms_norm_keeps_transformers_rounding_in_bf16():
    """The forward is the same expression (normalise in float32, round, then the weight):
    bit-identical in bf16, where the backward is computed in float32 instead."""
    cfg = presets.get("tiny-qwen2", embed_dim=48, dtype=jnp.bfloat16)
    plain, fused = _module_pair(RMSNorm, cfg, "fused_norm")
    x = _rng_normal((3, 5, 48), dtype=jnp.bfloat16)
    assert np.array_equal(np.asarray(plain(x), np.float32), np.asarray(fused(x), np.float32))
    _, g0 = _value_and_grads(plain, x, _rng_normal(x.shape, 3))
    _, g1 = _value_and_grads(fused, x, _rng_normal(x.shape, 3))
    assert g1[0].dtype == jnp.float32 and g1[1].dtype == jnp.bfloat16  # scale, x
    for a, b in zip(g0, g1):
        assert rel_err(np.asarray(b, np.float32), np.asarray(a, np.float32)) <= 2e-2


def test_fused_mlp_values_and_gradients():
    cfg = presets.get("tiny-qwen2", embed_dim=48, mlp_dim=77)
    plain, fused = _module_pair(MLP, cfg, "fused_mlp")
    _assert_same_values_and_grads(plain, fused, _rng_normal((3, 5, 48)))


@pytest.mark.parametrize("scaled", [False, True], ids=["default", "llama3_scaling"])
def test_rope_tables_values_and_gradients(scaled):
    cfg = presets.get("llama-3.1-8b" if scaled else "tiny-qwen2", head_dim=16)
    inv_freq = rope_inv_freq(cfg)
    positions = jnp.asarray(np.random.default_rng(1).integers(0, 40_000, size=(3, 5)))
    x = _rng_normal((3, 5, 4, 16))
    weights = _rng_normal(x.shape, 3)

    def plain(x):
        return jnp.sum(apply_rope(x, positions, inv_freq) * weights)

    def tables(x):
        cos, sin = rope_tables(positions, inv_freq, x.dtype)
        return jnp.sum(apply_rope_tables(x, cos, sin) * weights)

    want = apply_rope(x, positions, inv_freq)
    got = apply_rope_tables(x, *rope_tables(positions, inv_freq, x.dtype))
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        np.asarray(jax.grad(tables)(x)), np.asarray(jax.grad(plain)(x)), rtol=1e-6, atol=1e-6
    )


def _padded(vocab, b=3, t=11, seed=0):
    rng = np.random.default_rng(seed)
    tokens = jnp.asarray(rng.integers(2, vocab, size=(b, t)), jnp.int32)
    valid = np.ones((b, t), bool)
    valid[1, :4] = False  # left padding
    valid[2, 7:] = False  # right padding
    return tokens, jnp.asarray(valid)


@pytest.fixture(
    scope="module", params=["qwen2_odd", "llama3_scaled_gqa", "qwen3_tied_gqa_wide_heads"]
)
def ckpt(request, tmp_path_factory):
    return write_hf_checkpoint(tmp_path_factory.mktemp(request.param), **VARIANTS[request.param])


def _with(model, remat=False, **switches):
    """A model of `model`'s config with `switches` (and remat) set, sharing its parameters."""
    other = Transformer(model.config.replace(remat=remat, **switches), rngs=nnx.Rngs(1))
    nnx.update(other, nnx.state(model))
    return other


def test_fused_model_values_and_gradients_with_padding_and_remat(ckpt):
    """All three switches at once (each alone is checked layer by layer above)."""
    base = from_pretrained(ckpt)
    tokens, valid = _padded(base.config.vocab_size)
    weights = _rng_normal((*tokens.shape, base.config.vocab_size), 4) * valid[..., None]

    def value_and_grads(model):
        graphdef, state = nnx.split(model)

        def loss(state):
            logits = nnx.merge(graphdef, state)(tokens, attention_mask_BxT=valid)
            return jnp.sum(jax.nn.log_softmax(logits) * weights), logits

        (_, logits), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(state)
        return np.asarray(logits)[np.asarray(valid)], jax.tree.leaves(grads)

    l0, g0 = value_and_grads(base)
    for remat in (False, True):
        l1, g1 = value_and_grads(_with(base, remat=remat, **ALL))
        np.testing.assert_allclose(l1, l0, rtol=1e-5, atol=1e-5)
        for a, b in zip(g0, g1):
            assert rel_err(b, a) <= 1e-5, (remat, rel_err(b, a))


def test_fused_model_decodes_with_a_kv_cache_as_the_unfused_one(ckpt):
    base = from_pretrained(ckpt)
    fused = _with(base, **ALL)
    tokens, valid = _padded(base.config.vocab_size)

    def run(model):
        step = nnx.jit(lambda m, t, c, v: m.forward_with_cache(t, c, v))
        cache = KVCache.init(model.config, 3, 14)
        logits, cache = step(model, tokens, cache, valid)
        out = [logits]
        for s in range(3):
            logits, cache = step(model, tokens[:, s : s + 1], cache, jnp.ones((3, 1), bool))
            out.append(logits)
        return np.concatenate([np.asarray(o) for o in out], axis=1), cache

    (l0, c0), (l1, c1) = run(base), run(fused)
    np.testing.assert_allclose(l1, l0, rtol=1e-5, atol=1e-5)
    for a, b in zip(c0.k + c0.v, c1.k + c1.v):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-5)


def test_fused_logits_match_transformers(ckpt):
    fused = _with(from_pretrained(ckpt), **ALL)
    tokens = np.random.default_rng(0).integers(2, fused.config.vocab_size, size=(3, 17))
    with torch.no_grad():
        ref = load_hf(ckpt)(torch.tensor(tokens)).logits.numpy()
    assert rel_err(fused(jnp.asarray(tokens)), ref) <= TOL


def test_fused_model_on_a_tensor_parallel_mesh_equals_unsharded(tmp_path):
    """The stacked gate/up weight [D, F, 2] keeps its F axis on the "mlp" shard."""
    path = write_hf_checkpoint(tmp_path / "m", **VARIANTS["qwen2_tied_gqa"], vocab=256)
    single = _with(from_pretrained(path), **ALL)
    mesh = make_mesh(MeshConfig(2, 1, 4))
    sharded = _with(from_pretrained(path, mesh=mesh), **ALL)
    tokens = jnp.asarray(np.random.default_rng(0).integers(2, 256, size=(8, 12)))
    with jax.set_mesh(mesh):
        got = nnx.jit(lambda m, t: m(t))(sharded, tokens)
    np.testing.assert_allclose(np.asarray(got), np.asarray(single(tokens)), rtol=2e-5, atol=2e-5)
