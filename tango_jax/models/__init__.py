"""Flax NNX decoder-only transformers (Qwen2/2.5, Qwen3, Llama 3/3.1) and their HF checkpoints.

from tango_jax.models import from_pretrained, save_pretrained
model = from_pretrained("/path/to/Qwen2.5-0.5B", mesh=mesh, dtype=jnp.bfloat16)
logits_BxTxV = model(tokens_BxT)
save_pretrained(model, "/tmp/out", tokenizer=tokenizer)
"""

from tango_jax.models import presets
from tango_jax.models.config import Family, Llama3RopeScaling, ModelConfig
from tango_jax.models.hf import (
    CheckpointError,
    from_pretrained,
    iter_hf_tensors,
    read_config,
    save_pretrained,
    tensor_table,
)
from tango_jax.models.transformer import KVCache, Transformer

__all__ = [
    "CheckpointError",
    "Family",
    "KVCache",
    "Llama3RopeScaling",
    "ModelConfig",
    "Transformer",
    "from_pretrained",
    "iter_hf_tensors",
    "presets",
    "read_config",
    "save_pretrained",
    "tensor_table",
]
