"""LoRA adapters against transformers + PEFT (PyTorch, float32), the independent reference:
the same adapter weights give the same logits and the same gradients with respect to the
adapter parameters; our PEFT export and our merged HF checkpoint load there with the same
logits."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import peft
import pytest
import torch
from flax import nnx
from hf_fixtures import TOL, VARIANTS, load_hf, rel_err, write_hf_checkpoint

from tango_jax.models import Transformer, from_pretrained, presets, save_pretrained
from tango_jax.models.lora import PROJECTIONS, LoraConfig
from tango_jax.models.peft import load_peft_adapter, read_peft_config, save_peft_adapter
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.parallel.partition import abstract_model, state_shardings

# A Qwen2 (q/k/v biases, tied, grouped-query) and a Llama (no biases, llama3 rope, untied).
_VARIANTS = ["qwen2_tied_gqa", "llama3_scaled_gqa"]
_RANK, _ALPHA = 4, 8.0


def _peft_model(hf, targets, seed):
    """`hf` wrapped by PEFT with random A and B (std 0.1: every adapter moves the logits)."""
    cfg = peft.LoraConfig(
        r=_RANK, lora_alpha=_ALPHA, target_modules=list(targets), init_lora_weights=False
    )
    model = peft.get_peft_model(hf, cfg)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(0.1 * torch.randn_like(p))
    return model.eval()


@pytest.fixture(scope="module", params=_VARIANTS)
def adapted(request, tmp_path_factory):
    """(HF + PEFT model, our model with the same adapter loaded from PEFT's directory, dir)."""
    root = tmp_path_factory.mktemp(request.param)
    path = write_hf_checkpoint(root / "base", **VARIANTS[request.param])
    targets = ("q_proj", "v_proj", "o_proj", "up_proj", "down_proj")  # some: the names matter
    reference = _peft_model(load_hf(path), targets, seed=1)
    reference.save_pretrained(root / "adapter")
    lora = read_peft_config(root / "adapter")
    assert lora == LoraConfig(rank=_RANK, alpha=_ALPHA, targets=targets)
    ours = load_peft_adapter(from_pretrained(path, lora=lora), root / "adapter")
    return reference, ours, root


_logits = nnx.jit(lambda model, tokens: model(tokens))


def _tokens(vocab, shape, seed=0):
    return np.random.default_rng(seed).integers(2, vocab, size=shape)


def test_logits_match_peft(adapted):
    reference, ours, _ = adapted
    tokens = _tokens(ours.config.vocab_size, (2, 13))
    with torch.no_grad():
        ref = reference(torch.tensor(tokens)).logits.numpy()
        base = reference.get_base_model()
        with reference.disable_adapter():
            plain = base(torch.tensor(tokens)).logits.numpy()
    assert rel_err(ref, plain) > 100 * TOL  # the adapters matter
    assert rel_err(_logits(ours, jnp.asarray(tokens)), ref) <= TOL


def test_adapter_gradients_match_pytorch_autograd(adapted):
    """d(mean next-token log-prob)/d(A, B) of every adapter, against torch autograd."""
    reference, ours, _ = adapted
    tokens = _tokens(ours.config.vocab_size, (2, 11), seed=3)
    reference.zero_grad()
    logits = reference(torch.tensor(tokens)).logits
    logp = torch.log_softmax(logits[:, :-1], -1).gather(-1, torch.tensor(tokens[:, 1:, None]))
    logp.mean().backward()
    ref_grads = {n: p.grad.numpy() for n, p in reference.named_parameters() if "lora_" in n}

    def loss(model):
        lp = jax.nn.log_softmax(model(jnp.asarray(tokens))[:, :-1])
        return jnp.take_along_axis(lp, jnp.asarray(tokens[:, 1:, None]), -1).mean()

    grads = nnx.jit(nnx.grad(loss, argnums=nnx.DiffState(0, nnx.LoRAParam)))(ours)
    flat = dict(nnx.to_flat_state(grads))
    assert len(flat) == len(ref_grads) == 2 * 5 * ours.config.num_layers
    for (*layer, submodule, _, name, ab), g in flat.items():
        target = next(t for t, v in PROJECTIONS.items() if v == (submodule, name))
        hf_sub = "self_attn" if submodule == "attention" else "mlp"
        key = f"base_model.model.model.layers.{layer[1]}.{hf_sub}.{target}"
        key += f".lora_{'A' if ab == 'lora_a' else 'B'}.default.weight"
        assert rel_err(np.asarray(g.get_value()).T, ref_grads[key]) <= TOL, key


@pytest.mark.parametrize("adapted", ["qwen2_tied_gqa"], indirect=True)  # biases kept as they are
def test_exported_adapter_and_merged_checkpoint_load_in_peft_and_transformers(adapted, tmp_path):
    """Our adapters, changed in JAX, written as a PEFT directory (loaded by PEFT on the base)
    and merged into a plain HF checkpoint (loaded by transformers): the same logits."""
    _, ours, root = adapted
    ours = nnx.clone(ours)  # the module's model stays as PEFT's adapter set it
    state = nnx.state(ours, nnx.LoRAParam)
    keys = iter(jax.random.split(jax.random.key(5), len(jax.tree.leaves(state))))
    nnx.update(
        ours, jax.tree.map(lambda x: x + 0.05 * jax.random.normal(next(keys), x.shape), state)
    )
    tokens = _tokens(ours.config.vocab_size, (2, 9), seed=4)
    want = np.asarray(_logits(ours, jnp.asarray(tokens)))

    save_peft_adapter(ours, tmp_path / "exported")
    loaded = peft.PeftModel.from_pretrained(load_hf(root / "base"), tmp_path / "exported").eval()
    save_pretrained(ours, tmp_path / "merged")
    merged = load_hf(tmp_path / "merged")
    with torch.no_grad():
        via_peft = loaded(torch.tensor(tokens)).logits.numpy()
        via_merged = merged(torch.tensor(tokens)).logits.numpy()
    assert rel_err(via_peft, want) <= TOL
    assert rel_err(via_merged, want) <= TOL


@pytest.mark.parametrize("adapted", ["llama3_scaled_gqa"], indirect=True)
def test_fresh_adapters_change_nothing_and_are_float32_over_a_bf16_base(adapted):
    path = adapted[2] / "base"
    lora = LoraConfig(rank=2, alpha=4.0, targets=("k_proj", "gate_proj"))
    fresh = from_pretrained(path, lora=lora)
    plain = from_pretrained(path)
    tokens = jnp.asarray(_tokens(plain.config.vocab_size, (1, 7)))
    np.testing.assert_array_equal(_logits(fresh, tokens), _logits(plain, tokens))
    half = from_pretrained(path, lora=lora, param_dtype=jnp.bfloat16)
    dtypes = {v.dtype for v in jax.tree.leaves(nnx.state(half, nnx.LoRAParam))}
    assert dtypes == {jnp.dtype(jnp.float32)}
    assert half.layers[0].attention.k[...].dtype == jnp.bfloat16


def test_adapters_are_sharded_by_their_projections_logical_axes():
    """A [in, r] takes the projection's input axis, B [r, out] its output axis (on a
    fsdp 4 x tensor 2 mesh of the session's 8 devices; the rank is never split)."""
    config = presets.get("tiny-qwen2", lora=LoraConfig(rank=4))
    _, abstract = abstract_model(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    shardings = state_shardings(nnx.state(abstract, nnx.LoRAParam), make_mesh(MeshConfig(1, 4, 2)))
    specs = {
        path[2:]: tuple(s.get_value().spec)
        for path, s in nnx.to_flat_state(shardings)
        if path[1] == 0
    }
    fsdp_in, tensor_out = ("fsdp", None), (None, "tensor")
    tensor_in, fsdp_out = ("tensor", None), (None, "fsdp")
    expected = {"q": (fsdp_in, tensor_out), "k": (fsdp_in, tensor_out), "v": (fsdp_in, tensor_out)}
    expected |= {"o": (tensor_in, fsdp_out), "gate": (fsdp_in, tensor_out)}
    expected |= {"up": (fsdp_in, tensor_out), "down": (tensor_in, fsdp_out)}
    for (submodule, _, name, ab), spec in specs.items():
        assert spec == expected[name][ab == "lora_b"], (submodule, name, ab, spec)
    assert len(specs) == 2 * 7


@pytest.mark.parametrize("adapted", ["llama3_scaled_gqa"], indirect=True)
def test_merged_weights_of_a_bf16_base_are_rounded_once_to_the_requested_dtype(adapted):
    """bf16 base + float32 adapters: a float32 sync or save gets W + (alpha / r)·A·B unrounded
    (a vLLM server in float32 then computes what the JAX model does), a bf16 one rounds it."""
    from tango_jax.models import iter_hf_tensors

    lora = LoraConfig(rank=2, targets=("up_proj",))
    model = from_pretrained(adapted[2] / "base", param_dtype=jnp.bfloat16, lora=lora)
    mlp = model.layers[0].mlp
    mlp.adapters["up"].lora_b[...] = jnp.full_like(mlp.adapters["up"].lora_b[...], 1e-3)
    a, b = np.asarray(mlp.adapters["up"].lora_a[...]), np.asarray(mlp.adapters["up"].lora_b[...])
    want = (np.asarray(mlp.up[...], np.float32) + lora.scale * (a @ b)).T
    name = "model.layers.0.mlp.up_proj.weight"
    f32 = dict(iter_hf_tensors(model, dtype=jnp.float32))[name]
    np.testing.assert_allclose(np.asarray(f32), want, rtol=1e-6)  # bf16 rounding: ~4e-3
    bf16 = dict(iter_hf_tensors(model, dtype=jnp.bfloat16))[name]
    assert bf16.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(bf16, np.float32), want, rtol=2**-8)
