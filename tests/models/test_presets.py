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
    published = presets.PUBLISHED_PARAMS[name]
    assert _rounded_like(count, published) == published, f"{name}: {count:,}"


def _rounded_like(count: int, published: str) -> str:
    """`count` in billions, to as many decimals as the published figure has."""
    return f"{count / 1e9:.{len(published.partition('.')[2])}f}"


@pytest.mark.parametrize("name", sorted(presets.PUBLISHED_NON_EMBEDDING_PARAMS))
def test_preset_non_embedding_count_matches_published(name):
    config = presets.get(name)
    embeddings = config.vocab_size * config.embed_dim * (1 if config.tie_word_embeddings else 2)
    published = presets.PUBLISHED_NON_EMBEDDING_PARAMS[name]
    assert _rounded_like(config.num_params() - embeddings, published) == published, name


@pytest.mark.parametrize("name", ["tiny-qwen2", "tiny-qwen3", "tiny-llama"])
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
