"""Named presets: built abstractly (no memory) and checked against published sizes."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx

from tango_jax.models import ModelConfig, Transformer, presets


@pytest.mark.parametrize("name", sorted(presets.PUBLISHED_PARAMS))
def test_preset_parameter_count_matches_published(name):
    config = presets.get(name)
    abstract = nnx.eval_shape(lambda: Transformer(config, rngs=nnx.Rngs(0)))
    count = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(abstract)))
    assert count == config.num_params()
    assert f"{count / 1e9:.2f}" == presets.PUBLISHED_PARAMS[name], f"{name}: {count:,}"


@pytest.mark.parametrize("name", ["tiny-qwen2", "tiny-llama"])
def test_tiny_presets_have_vllm_cpu_head_size(name):
    assert presets.get(name).head_dim == 64


def test_hf_config_round_trip():
    for name in presets.PRESETS:
        config = presets.get(name)
        again = ModelConfig.from_hf_dict(config.to_hf_dict())
        assert again == config, name


def test_unknown_preset_lists_known_ones():
    with pytest.raises(ValueError, match="qwen2.5-7b"):
        presets.get("qwen3-235b")


def test_bad_config_values_are_named():
    with pytest.raises(
        ValueError, match="num_heads \\(6\\) must be a multiple of num_kv_heads \\(4\\)"
    ):
        presets.get("tiny-qwen2", num_heads=6, num_kv_heads=4)
