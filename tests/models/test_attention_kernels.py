"""ModelConfig.attention: the choice of kernel, its errors, and cuDNN's flash attention against
the XLA einsums (the GPU test runs only where JAX has an NVIDIA GPU; CI has none)."""

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from tango_jax.config.roles import RoleConfig
from tango_jax.models import Transformer, presets
from tango_jax.models.transformer import (
    Frame,
    KVCache,
    attention_block,
    compact_padding,
    use_cudnn,
    use_summed_decode,
)
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
@pytest.mark.parametrize("as_lengths", [False, True], ids=["mask", "lengths"])
def test_cudnn_matches_xla_with_padding_values_and_gradients(as_lengths):
    cfg = presets.get(
        "tiny-qwen2", dtype=jnp.bfloat16, embed_dim=256, num_heads=4, num_kv_heads=2, head_dim=64
    ).replace(padding_as_lengths=as_lengths)
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


# --- padding as lengths (ModelConfig.padding_as_lengths) and the cuDNN call's inputs ---


def _holey_batch(cfg, b=4, t=40, seed=1):
    """Left padding, right padding, both, and a hole in the middle of a row."""
    rng = np.random.default_rng(seed)
    tokens = jnp.asarray(rng.integers(2, cfg.vocab_size, size=(b, t)), jnp.int32)
    valid = np.ones((b, t), bool)
    valid[0, :9] = False
    valid[1, 25:] = False
    valid[2, :3] = valid[2, 33:] = False
    valid[3, 10:14] = False
    valid = jnp.asarray(valid)
    return tokens, valid, jnp.asarray(rng.normal(size=(b, t)), jnp.float32) * valid


def test_compact_padding_moves_real_tokens_first_in_order():
    valid = jnp.asarray([[0, 0, 1, 1, 0, 1], [1, 1, 1, 1, 1, 1], [1, 0, 1, 0, 0, 0]], bool)
    order, inverse = compact_padding(valid)
    np.testing.assert_array_equal(
        np.asarray(order), [[2, 3, 5, 0, 1, 4], [0, 1, 2, 3, 4, 5], [0, 2, 1, 3, 4, 5]]
    )
    x = jnp.arange(18).reshape(3, 6)
    back = jnp.take_along_axis(jnp.take_along_axis(x, order, 1), inverse, 1)
    np.testing.assert_array_equal(np.asarray(back), np.asarray(x))


@pytest.mark.parametrize("kernel", ["xla", "xla_blocked"])
def test_padding_as_lengths_gives_the_same_values_and_gradients(kernel):
    cfg = presets.get("tiny-qwen2", embed_dim=128, num_heads=4, num_kv_heads=2, head_dim=32)
    cfg = cfg.replace(attention=kernel)
    tokens, valid, weights = _holey_batch(cfg, t=150 if kernel == "xla_blocked" else 40)
    value_m, h_m, g_m = _hidden_and_grads(cfg, kernel, tokens, valid, weights)
    lengths = cfg.replace(padding_as_lengths=True)
    value_l, h_l, g_l = _hidden_and_grads(lengths, kernel, tokens, valid, weights)
    np.testing.assert_allclose(h_l, h_m, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(value_l, value_m, rtol=1e-5, atol=1e-5)
    for gm, gl in zip(jax.tree.leaves(g_m), jax.tree.leaves(g_l)):
        np.testing.assert_allclose(np.asarray(gl), np.asarray(gm), rtol=1e-4, atol=1e-6)
    # no mask at all (every token real): the compaction is skipped, the numbers are the same
    model = Transformer(lengths, rngs=nnx.Rngs(0))
    want = Transformer(cfg, rngs=nnx.Rngs(0)).hidden_states(tokens)
    np.testing.assert_allclose(np.asarray(model.hidden_states(tokens)), np.asarray(want), 1e-5)


class _Recorded:
    """Stands in for cuDNN off the GPU: records what the model passes to
    jax.nn.dot_product_attention, then runs JAX's reference ("xla") implementation of that
    same call inside a jit named `_recorded_attention` (a boundary in the jaxpr)."""

    def __init__(self, original):
        self.original, self.calls = original, []

    def __call__(self, q, k, v, bias=None, mask=None, **kw):
        self.calls.append(dict(q=q.aval, k=k.aval, v=v.aval, bias=bias, mask=mask, **kw))
        kw = kw | dict(implementation="xla")

        def _recorded_attention(q, k, v, mask):
            return self.original(q, k, v, bias, mask, **kw)

        return jax.jit(_recorded_attention)(q, k, v, mask)


def _transposes_outside(jaxpr, boundary: str) -> list:
    found = []
    for eqn in jaxpr.eqns:
        if eqn.params.get("name") == boundary:
            continue
        if eqn.primitive.name == "transpose":
            found.append(eqn)
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            found += _transposes_outside(sub, boundary)
    return found


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("as_lengths", [False, True], ids=["mask", "lengths"])
def test_the_flash_path_passes_bf16_btnh_without_a_transpose(monkeypatch, head_dim, as_lengths):
    """What the cuDNN branch hands to jax.nn.dot_product_attention, checked on a CPU: bf16
    q [B, T, N, H] and k/v [B, T, K, H] straight from the projections (no transpose in the
    layer's jaxpr outside the call), the padding as lengths without a mask or bias when
    padding_as_lengths is on; and the call computes what the einsum kernel does."""
    from tango_jax.models import transformer

    recorded = _Recorded(jax.nn.dot_product_attention)
    monkeypatch.setattr(jax.nn, "dot_product_attention", recorded)
    monkeypatch.setattr(transformer, "use_cudnn", lambda config, dtype: True)
    cfg = presets.get(
        "tiny-qwen2", dtype=jnp.bfloat16, embed_dim=256, num_heads=4, num_kv_heads=2,
        head_dim=head_dim, padding_as_lengths=as_lengths,
    )  # fmt: skip
    tokens, valid, weights = _holey_batch(cfg, t=48)
    _, h_c, g_c = _hidden_and_grads(cfg, "auto", tokens, valid, weights)
    b, t = tokens.shape
    assert len(recorded.calls) == cfg.num_layers
    call = recorded.calls[0]
    assert call["q"].shape == (b, t, 4, head_dim) and call["k"].shape == (b, t, 2, head_dim)
    assert call["v"].shape == call["k"].shape
    assert {call[x].dtype for x in "qkv"} == {jnp.dtype(jnp.bfloat16)}
    assert call["is_causal"] and call["bias"] is None and call["implementation"] == "cudnn"
    if as_lengths:
        assert call["mask"] is None and call["query_seq_lengths"].dtype == jnp.int32
    else:
        assert call["mask"].shape == (b, 1, t, t) and "query_seq_lengths" not in call

    layer = Transformer(cfg, rngs=nnx.Rngs(0)).layers[0]
    x = jnp.zeros((b, t, cfg.embed_dim), jnp.bfloat16)
    frame = Frame.full_sequence(valid)
    if as_lengths:
        frame = frame._replace(lengths=valid.sum(1, dtype=jnp.int32))
    jaxpr = jax.make_jaxpr(lambda x: layer(x, frame)[0])(x).jaxpr
    assert not _transposes_outside(jaxpr, "_recorded_attention")

    monkeypatch.undo()  # the einsum kernel, as the reference
    _, h_x, g_x = _hidden_and_grads(cfg, "xla", tokens, valid, weights)
    assert np.linalg.norm(h_c - h_x) <= 2e-2 * np.linalg.norm(h_x)  # bf16 operands
    for gx, gc in zip(jax.tree.leaves(g_x), jax.tree.leaves(g_c)):
        gx, gc = np.asarray(gx, np.float32), np.asarray(gc, np.float32)
        assert np.linalg.norm(gc - gx) <= 3e-2 * np.linalg.norm(gx) + 1e-6


# --- the decode step's attention over the KV cache (ModelConfig.decode_attention) ---


def test_unknown_decode_kernel_is_rejected_naming_the_field():
    with pytest.raises(ValueError, match=r"decode_attention \('flash'\).*'auto', 'dot', 'sum'"):
        presets.get("tiny-qwen2", decode_attention="flash")
    with pytest.raises(FieldError, match=r"decode_attention \('flash'\) must be one of"):
        RoleConfig(decode_attention="flash")
    assert RoleConfig(decode_attention="dot").model_numerics()["decode_attention"] == "dot"


def test_auto_decodes_with_sums_on_a_cpu_only():
    cfg = presets.get("tiny-qwen2")
    assert use_summed_decode(cfg) == (jax.default_backend() == "cpu")
    assert use_summed_decode(cfg.replace(decode_attention="sum"))
    assert not use_summed_decode(cfg.replace(decode_attention="dot"))


@pytest.mark.parametrize("preset", ["tiny-qwen3", "tiny-llama"])  # G = 2 and 4 query heads per KV
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_summed_decode_gives_the_dot_kernels_steps(preset, dtype):
    """Prefill left-padded prompts, then decode 5 tokens per row (teacher forcing, the last
    steps over the filled slots only): every step's logits and the cache are those of the
    batched products, up to float rounding (bf16: the sums run in float32)."""
    dt = jnp.float32 if dtype == "float32" else jnp.bfloat16
    cfg = presets.get(preset, dtype=dt)
    rng = np.random.default_rng(4)
    lengths, width, steps = [6, 2, 4], 6, 5
    prompt = np.zeros((3, width), np.int32)
    valid = np.zeros((3, width), bool)
    for i, n in enumerate(lengths):
        prompt[i, width - n :] = rng.integers(2, cfg.vocab_size, n)
        valid[i, width - n :] = True
    new = rng.integers(2, cfg.vocab_size, (steps, 3, 1)).astype(np.int32)
    runs = {}
    for kernel in ("dot", "sum"):
        model = Transformer(cfg.replace(decode_attention=kernel), rngs=nnx.Rngs(0))
        step = nnx.jit(
            lambda m, tok, c, v, span: m.forward_with_cache(tok, c, v, span=span),
            static_argnames="span",
        )
        cache = KVCache.init(model.config, 3, width + steps)
        logits, cache = step(model, jnp.asarray(prompt), cache, jnp.asarray(valid), span=None)
        out = []
        for s in range(steps):
            span = width + s + 1 if s >= 3 else None
            logits, cache = step(model, jnp.asarray(new[s]), cache, jnp.ones((3, 1), bool), span)
            out.append(np.asarray(logits[:, 0], np.float32))
        runs[kernel] = np.stack(out), np.asarray(cache.k[-1], np.float32)
    tol = 1e-5 if dtype == "float32" else 3e-2
    (dot_logits, dot_k), (sum_logits, sum_k) = runs["dot"], runs["sum"]
    scale = np.abs(dot_logits).max()
    assert np.abs(sum_logits - dot_logits).max() <= tol * scale
    assert np.abs(sum_k - dot_k).max() <= tol * np.abs(dot_k).max()
