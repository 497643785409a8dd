"""Model correctness against Hugging Face transformers (PyTorch, float32), the reference."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from hf_fixtures import TOL, VARIANTS, load_hf, rel_err, write_hf_checkpoint
from jaxpr_dots import dot_operands

from tango_jax.models import KVCache, from_pretrained
from tango_jax.models.matmul import dense
from tango_jax.models.transformer import Frame, query_block, rope_inv_freq


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def pair(request, tmp_path_factory):
    """(variant name, HF torch model, our model) loaded from the same checkpoint."""
    path = write_hf_checkpoint(tmp_path_factory.mktemp(request.param), **VARIANTS[request.param])
    return request.param, load_hf(path), from_pretrained(path)


def _tokens(vocab, shape, seed=0):
    return np.random.default_rng(seed).integers(2, vocab, size=shape)


def test_logits_match_transformers(pair):
    _, hf, ours = pair
    tokens = _tokens(ours.config.vocab_size, (3, 17))
    with torch.no_grad():
        ref = hf(torch.tensor(tokens)).logits.numpy()
    assert rel_err(ours(jnp.asarray(tokens)), ref) <= TOL


def test_padded_logits_match_transformers(pair):
    """Left padding with an attention mask and HF-style position ids."""
    _, hf, ours = pair
    tokens = _tokens(ours.config.vocab_size, (2, 12), seed=1)
    mask = np.ones_like(tokens)
    mask[0, :5] = 0  # row 0 left-padded by 5
    positions = np.maximum(np.cumsum(mask, 1) - 1, 0)
    with torch.no_grad():
        ref = hf(
            torch.tensor(tokens),
            attention_mask=torch.tensor(mask),
            position_ids=torch.tensor(positions),
        ).logits.numpy()
    got = np.asarray(ours(jnp.asarray(tokens), attention_mask_BxT=jnp.asarray(mask)))
    valid = mask.astype(bool)
    assert rel_err(got[valid], ref[valid]) <= TOL


def test_rope_frequencies_match(pair):
    _, hf, ours = pair
    ref = hf.model.rotary_emb.inv_freq.numpy()
    np.testing.assert_allclose(rope_inv_freq(ours.config), ref, rtol=1e-6)


def _causal_mask_4d(t):
    m = torch.full((t, t), torch.finfo(torch.float32).min).triu(1)
    return m[None, None]


def test_layers_match_transformers(pair):
    """RMSNorm, attention, MLP and a whole decoder layer, each on the same random input."""
    _, hf, ours = pair
    hf_layer, our_layer = hf.model.layers[1], ours.layers[1]
    d = ours.config.embed_dim
    x = np.random.default_rng(2).normal(size=(2, 9, d)).astype(np.float32)
    positions = np.tile(np.arange(9), (2, 1))
    xt = torch.tensor(x)
    frame = Frame.full_sequence(jnp.ones((2, 9), bool), jnp.asarray(positions))
    with torch.no_grad():
        cos_sin = hf.model.rotary_emb(xt, torch.tensor(positions))
        ref_norm = hf_layer.input_layernorm(xt).numpy()
        ref_attn = hf_layer.self_attn(xt, cos_sin, _causal_mask_4d(9))[0].numpy()
        ref_mlp = hf_layer.mlp(xt).numpy()
        ref_layer = hf_layer(
            xt,
            attention_mask=_causal_mask_4d(9),
            position_embeddings=cos_sin,
            position_ids=torch.tensor(positions),
        )
        ref_layer = (ref_layer[0] if isinstance(ref_layer, tuple) else ref_layer).numpy()
    xj = jnp.asarray(x)
    assert rel_err(our_layer.input_norm(xj), ref_norm) <= TOL
    assert rel_err(our_layer.attention(xj, frame, None)[0], ref_attn) <= TOL
    assert rel_err(our_layer.mlp(xj), ref_mlp) <= TOL
    assert rel_err(our_layer(xj, frame)[0], ref_layer) <= TOL


# The cache and causality mechanics do not depend on the family; two variants with GQA, odd
# sizes, biases and llama3 rope cover them (the logits tests above cover every variant).
_MECHANICS = ["qwen2_odd", "llama3_scaled_gqa"]


@pytest.fixture(scope="module", params=_MECHANICS)
def mech(request, tmp_path_factory):
    path = write_hf_checkpoint(tmp_path_factory.mktemp(request.param), **VARIANTS[request.param])
    return from_pretrained(path)


@pytest.mark.parametrize("read", ["all", "filled"])
@pytest.mark.parametrize("padding", ["left", "right"])
def test_kv_cache_decode_equals_full_forward(mech, padding, read):
    """Prefill padded prompts of different lengths, then decode token by token (teacher
    forcing): every step's logits equal the full forward of the unpadded sequence. read
    "filled": each call attends over only the slots filled so far (`span`)."""
    model = mech
    rng = np.random.default_rng(3)
    lengths, decode_steps, width = [7, 3, 5], 6, 7
    seqs = [rng.integers(2, model.config.vocab_size, size=n + decode_steps) for n in lengths]
    prompt = np.zeros((3, width), np.int32)
    valid = np.zeros((3, width), bool)
    for i, n in enumerate(lengths):
        sl = slice(width - n, width) if padding == "left" else slice(0, n)
        prompt[i, sl], valid[i, sl] = seqs[i][:n], True
    cache = KVCache.init(model.config, 3, width + decode_steps)
    step = nnx.jit(
        lambda m, tok, c, v, span: m.forward_with_cache(tok, c, v, span=span),
        static_argnames="span",
    )
    filled = read == "filled"
    logits, cache = step(
        model, jnp.asarray(prompt), cache, jnp.asarray(valid), span=width if filled else None
    )
    last = [width - 1 if padding == "left" else n - 1 for n in lengths]
    got = [[np.asarray(logits[i, j])] for i, j in enumerate(last)]
    for s in range(decode_steps - 1):
        tok = np.array([[seq[n + s]] for seq, n in zip(seqs, lengths)], np.int32)
        span = width + s + 1 if filled else None
        logits, cache = step(model, jnp.asarray(tok), cache, jnp.ones((3, 1), bool), span=span)
        for i in range(3):
            got[i].append(np.asarray(logits[i, 0]))
    # Reference: the plain forward of each whole unpadded sequence (right-padded batch; the
    # real tokens of a right-padded row never attend to its padding).
    total = max(lengths) + decode_steps - 1
    full_in = np.zeros((3, total), np.int32)
    for i, (seq, n) in enumerate(zip(seqs, lengths)):
        full_in[i, : n + decode_steps - 1] = seq[: n + decode_steps - 1]
    full = np.asarray(model(jnp.asarray(full_in)))
    for i, n in enumerate(lengths):
        expected = full[i, n - 1 : n + decode_steps - 1]
        assert rel_err(np.stack(got[i]), expected) <= TOL, f"row {i} ({padding} padded)"


def test_prefill_with_last_only_gives_the_last_column_and_the_same_cache(mech):
    """`last_only=True` (the sampler's prefill): the last column of the full prefill's logits,
    and the same cache, so the decode after it is unchanged."""
    model = mech
    prompt = jnp.asarray(_tokens(model.config.vocab_size, (3, 7)))
    valid = jnp.asarray(np.arange(7)[None, :] >= np.array([[0], [4], [2]]))  # left padding
    step = nnx.jit(
        lambda m, tok, c, v, last: m.forward_with_cache(tok, c, v, last_only=last),
        static_argnames="last",
    )
    full, cache_full = step(model, prompt, KVCache.init(model.config, 3, 9), valid, last=False)
    only, cache_only = step(model, prompt, KVCache.init(model.config, 3, 9), valid, last=True)
    assert only.shape == (3, 1, model.config.vocab_size)
    np.testing.assert_allclose(
        np.asarray(only[:, 0]), np.asarray(full[:, -1]), rtol=1e-6, atol=1e-6
    )
    for a, b in zip(jax.tree.leaves(cache_full), jax.tree.leaves(cache_only), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_prefill_longer_than_a_query_block_equals_the_full_forward(mech, monkeypatch):
    """A large prefill (here: any) attends 64 queries at a time against the whole cache (its
    scores would otherwise be rows x heads x prompt x slots floats at once): left-padded
    prompts of 150, 90 and 131 tokens (blocks 64, 64, 22) give the unpadded full forward's
    logits at every real position."""
    from tango_jax.models import transformer

    monkeypatch.setattr(transformer, "PREFILL_SCORES_BYTES", 0)  # block even these small ones
    model = mech
    lengths, width = [150, 90, 131], 150
    assert query_block(width) == 64
    rng = np.random.default_rng(5)
    seqs = [rng.integers(2, model.config.vocab_size, size=n) for n in lengths]
    prompt = np.zeros((3, width), np.int32)
    valid = np.zeros((3, width), bool)
    full_in = np.zeros((3, width), np.int32)
    for i, n in enumerate(lengths):
        prompt[i, width - n :], valid[i, width - n :] = seqs[i], True
        full_in[i, :n] = seqs[i]
    step = nnx.jit(lambda m, tok, c, v: m.forward_with_cache(tok, c, v))
    cache = KVCache.init(model.config, 3, width + 4)
    logits, _ = step(model, jnp.asarray(prompt), cache, jnp.asarray(valid))
    full = np.asarray(model(jnp.asarray(full_in)))
    for i, n in enumerate(lengths):
        got = np.asarray(logits[i, width - n :])
        assert rel_err(got, full[i, :n]) <= TOL, f"row {i}"


def test_model_is_causal(mech):
    """d logits[t] / d embeddings[t'] == 0 for every t' > t (nanodo's gradient test)."""
    model = mech
    t = 6
    emb = model.embed_tokens(jnp.asarray(_tokens(model.config.vocab_size, (1, t))))

    def logit_sums(e):  # [T]: sum of the logits at each position
        return model.logits_from_hidden(model.hidden_states(None, embeddings_BxTxD=e))[0].sum(-1)

    jac = np.abs(np.asarray(jax.jit(jax.jacrev(logit_sums))(emb))).sum(-1)[:, 0]  # [T, T']
    assert np.all(np.triu(jac, k=1) == 0.0), "a position sees the future"
    assert np.all(np.diag(jac) > 0), "a position does not see itself"


def test_bf16_compute_with_f32_params(tmp_path):
    """bf16 activations over f32 master weights: params stay f32, logits close to f32 run."""
    path = write_hf_checkpoint(tmp_path / "m", **VARIANTS["qwen2_tied_gqa"])
    f32 = from_pretrained(path)
    mixed = from_pretrained(path, dtype=jnp.bfloat16, param_dtype=jnp.float32)
    assert mixed.layers[0].mlp.up[...].dtype == jnp.float32
    tokens = jnp.asarray(_tokens(f32.config.vocab_size, (2, 11)))
    h = mixed.hidden_states(tokens)
    assert h.dtype == jnp.bfloat16
    assert rel_err(mixed(tokens), f32(tokens)) < 0.05  # bf16 has ~3 significant digits


def test_remat_gives_same_gradients(tmp_path):
    path = write_hf_checkpoint(tmp_path / "m", **VARIANTS["llama3_scaled_gqa"])
    plain, remat = from_pretrained(path), from_pretrained(path, remat=True)
    tokens = jnp.asarray(_tokens(plain.config.vocab_size, (2, 8)))

    def loss(m):
        return jax.nn.log_softmax(m(tokens)).mean()

    g1 = nnx.jit(nnx.grad(loss))(plain)
    g2 = nnx.jit(nnx.grad(loss))(remat)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        assert rel_err(a, b) <= 1e-5  # remat only reorders float operations


@pytest.mark.parametrize(
    "x_shape, w_shape",
    [((3, 5, 4), (4, 7)), ((3, 5, 2, 3), (2, 3, 7)), ((3, 5, 4), (4, 2, 3))],
    ids=["BTD,DF", "BTNH,NHD", "BTD,DNH"],
)
def test_dense_is_one_two_dimensional_matmul_forward_and_backward(x_shape, w_shape):
    """`dense` against NumPy (values, both gradients), and the property its speed rests on: the
    forward and both backward products are 2-D matmuls (XLA:CPU lowers the multi-axis einsum's
    weight gradient through transposing copies; see tango_jax/models/matmul.py)."""
    in_axes = len(x_shape) - 2
    rng = np.random.default_rng(len(x_shape) + len(w_shape))
    x64, w64 = rng.normal(size=x_shape), rng.normal(size=w_shape)
    g64 = rng.normal(size=x_shape[:2] + w_shape[in_axes:])
    out_axes = list(range(2, g64.ndim))  # the multi-axis products, in float64
    ref = (
        np.tensordot(x64, w64, axes=in_axes),
        np.tensordot(g64, w64, axes=(out_axes, list(range(in_axes, w64.ndim)))),
        np.tensordot(x64, g64, axes=([0, 1], [0, 1])),
    )

    x, w = jnp.asarray(x64, jnp.float32), jnp.asarray(w64, jnp.float32)
    out, vjp = jax.vjp(lambda x, w: dense(x, w, in_axes=in_axes), x, w)
    for got, want in zip((out, *vjp(jnp.asarray(g64, jnp.float32))), ref):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)

    grad = jax.grad(lambda x, w: dense(x, w, in_axes=in_axes).sum(), argnums=(0, 1))
    dots = dot_operands(jax.make_jaxpr(grad)(x, w).jaxpr)
    assert [tuple(a.ndim for a in ops) for ops in dots] == [(2, 2)] * 3


def test_dense_rejects_axes_that_only_match_in_size():
    with pytest.raises(ValueError, match=r"last 2 axes of x \(4, 2, 3\) must equal the first 2"):
        dense(jnp.zeros((4, 2, 3)), jnp.zeros((3, 2, 5)), in_axes=2)
