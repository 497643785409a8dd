"""HF checkpoint round trips and bad-input errors."""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from hf_fixtures import TOL, VARIANTS, load_hf, rel_err, write_hf_checkpoint
from safetensors.numpy import load_file

from tango_jax.models import CheckpointError, from_pretrained, save_pretrained


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return write_hf_checkpoint(tmp_path_factory.mktemp("src") / "m", **VARIANTS["qwen2_tied_gqa"])


@pytest.mark.parametrize("variant", ["qwen2_untied_mha", "llama3_scaled_gqa"])
def test_save_then_transformers_gives_same_logits(tmp_path, variant):
    src = write_hf_checkpoint(tmp_path / "src", **VARIANTS[variant])
    model = from_pretrained(src)
    out = save_pretrained(model, tmp_path / "out")
    tokens = np.random.default_rng(0).integers(2, model.config.vocab_size, size=(2, 10))
    with torch.no_grad():
        ref = load_hf(out)(torch.tensor(tokens)).logits.numpy()
    assert rel_err(model(jnp.asarray(tokens)), ref) <= TOL


def test_load_then_save_gives_identical_tensors(tmp_path, ckpt):
    out = save_pretrained(from_pretrained(ckpt), tmp_path / "out")
    before, after = (
        load_file(str(ckpt / "model.safetensors")),
        load_file(str(out / "model.safetensors")),
    )
    before.pop("lm_head.weight", None)  # tied: transformers may or may not store it
    assert sorted(before) == sorted(after)
    for name in before:
        np.testing.assert_array_equal(before[name], after[name], err_msg=name)


def test_sharded_checkpoint_with_index_loads(tmp_path):
    """transformers' own sharded layout (several files + model.safetensors.index.json)."""
    src = write_hf_checkpoint(
        tmp_path / "src", max_shard_size="100KB", **VARIANTS["qwen2_untied_mha"]
    )
    assert (src / "model.safetensors.index.json").exists()
    single = write_hf_checkpoint(tmp_path / "single", **VARIANTS["qwen2_untied_mha"])
    tokens = jnp.asarray(np.random.default_rng(0).integers(2, 100, size=(1, 7)))
    np.testing.assert_array_equal(from_pretrained(src)(tokens), from_pretrained(single)(tokens))


def test_our_sharded_save_loads_in_transformers(tmp_path, ckpt):
    model = from_pretrained(ckpt)
    out = save_pretrained(model, tmp_path / "out", max_shard_bytes=50_000)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    tokens = np.arange(2, 12)[None]
    with torch.no_grad():
        ref = load_hf(out)(torch.tensor(tokens)).logits.numpy()
    assert rel_err(model(jnp.asarray(tokens)), ref) <= TOL


def test_save_in_bf16(tmp_path, ckpt):
    out = save_pretrained(from_pretrained(ckpt), tmp_path / "out", dtype=jnp.bfloat16)
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"
    model = load_hf(out)
    assert model.model.embed_tokens.weight.dtype == torch.float32  # loaded as asked, from bf16
    assert load_file(str(out / "model.safetensors"))["model.norm.weight"].dtype.name == "bfloat16"


def test_save_refuses_to_overwrite_and_leaves_no_partial_dir(tmp_path, ckpt):
    model = from_pretrained(ckpt)
    out = save_pretrained(model, tmp_path / "out")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_pretrained(model, out)
    save_pretrained(model, out, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temp or old dirs left


# --- bad input ---------------------------------------------------------------------------------


def test_missing_safetensors_file(tmp_path):
    src = write_hf_checkpoint(
        tmp_path / "m", max_shard_size="100KB", **VARIANTS["qwen2_untied_mha"]
    )
    victim = sorted(src.glob("model-*.safetensors"))[-1]
    victim.unlink()
    with pytest.raises(CheckpointError, match=victim.name):
        from_pretrained(src)


def test_no_weights_at_all(tmp_path, ckpt):
    (tmp_path / "config.json").write_text((ckpt / "config.json").read_text())
    with pytest.raises(CheckpointError, match="no \\*.safetensors"):
        from_pretrained(tmp_path)


def test_truncated_safetensors_file(tmp_path):
    src = write_hf_checkpoint(tmp_path / "m", **VARIANTS["qwen2_untied_mha"])
    f = src / "model.safetensors"
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="model.safetensors.*(truncated|corrupt)"):
        from_pretrained(src)


def test_unsupported_architecture(tmp_path, ckpt):
    src = write_hf_checkpoint(tmp_path / "m", **VARIANTS["qwen2_untied_mha"])
    cfg = json.loads((src / "config.json").read_text())
    cfg.update(model_type="gpt2", architectures=["GPT2LMHeadModel"])
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="model_type 'gpt2'.*not supported"):
        from_pretrained(src)


def test_tensor_of_wrong_shape(tmp_path):
    from safetensors.numpy import save_file

    src = write_hf_checkpoint(tmp_path / "m", **VARIANTS["qwen2_untied_mha"])
    tensors = load_file(str(src / "model.safetensors"))
    name = "model.layers.1.mlp.up_proj.weight"
    tensors[name] = tensors[name][:-1]
    save_file(tensors, str(src / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=f"'{name}' has shape"):
        from_pretrained(src)


def test_missing_tensor(tmp_path):
    from safetensors.numpy import save_file

    src = write_hf_checkpoint(tmp_path / "m", **VARIANTS["qwen2_untied_mha"])
    tensors = load_file(str(src / "model.safetensors"))
    del tensors["model.layers.0.self_attn.k_proj.bias"]
    save_file(tensors, str(src / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="'model.layers.0.self_attn.k_proj.bias' is missing"):
        from_pretrained(src)


def test_config_disagreeing_with_weights(tmp_path):
    """A config.json with fewer layers than the weights: an error, not a truncated model."""
    src = write_hf_checkpoint(tmp_path / "m", **VARIANTS["qwen2_untied_mha"])
    cfg = json.loads((src / "config.json").read_text())
    cfg["num_hidden_layers"] = 1
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="model.layers.1.*not part of"):
        from_pretrained(src)


def test_missing_directory(tmp_path):
    with pytest.raises(CheckpointError, match="config.json does not exist"):
        from_pretrained(tmp_path / "nope")
