"""Random-initialised tiny checkpoints: ordinary HF directories with the project's tokenizer.

The tiny configs start from these (then format SFT); tests serve them with vLLM.
"""

from __future__ import annotations

import os
from pathlib import Path

from flax import nnx

from tango_jax.models import presets
from tango_jax.models.hf import save_pretrained
from tango_jax.models.transformer import Transformer


def write_tiny_checkpoint(
    path: str | os.PathLike,
    preset: str = "tiny-qwen2",
    *,
    seed: int = 0,
    overwrite: bool = False,
    **overrides,
) -> Path:
    """Initialises preset `preset` with `seed` and saves it, tokenizer included, at `path`."""
    from tango_jax.models.tokenizer import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    config = presets.get(preset, **overrides)
    if len(tokenizer) > config.vocab_size:
        raise ValueError(
            f"preset '{preset}' has vocab_size {config.vocab_size} but the tiny tokenizer has "
            f"{len(tokenizer)} tokens; raise presets.TINY_VOCAB_SIZE."
        )
    model = Transformer(config, rngs=nnx.Rngs(seed))
    return save_pretrained(model, path, tokenizer=tokenizer, overwrite=overwrite)
