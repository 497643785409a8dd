"""Tiny random Hugging Face checkpoints written by `transformers` itself (the reference)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import transformers

# Qwen3 (also tests/models/test_qwen3.py): head_dim != hidden / heads both ways (wider, as in
# Qwen3-0.6B, and narrower), tied and untied, grouped-query at two ratios.
QWEN3_VARIANTS = {
    "qwen3_tied_gqa_wide_heads": dict(
        family="qwen3", tie=True, heads=4, kv_heads=2, hidden=64, inter=144, head_dim=32
    ),
    "qwen3_untied_gqa4_narrow_heads": dict(
        family="qwen3", tie=False, heads=8, kv_heads=2, hidden=96, inter=160, head_dim=8
    ),
}

# Variants the parity tests cover: GQA ratio > 1, tied/untied, q/k/v bias (qwen2), per-head q/k
# norms and head_dim != hidden / heads (qwen3), llama3 rope scaling, odd sizes.
VARIANTS = {
    "qwen2_tied_gqa": dict(family="qwen2", tie=True, heads=4, kv_heads=2, hidden=128, inter=200),
    "qwen2_untied_mha": dict(family="qwen2", tie=False, heads=2, kv_heads=2, hidden=96, inter=160),
    "qwen2_odd": dict(
        family="qwen2", tie=False, heads=6, kv_heads=2, hidden=84, inter=77, head_dim=14, vocab=97
    ),
    "llama3_scaled_gqa": dict(
        family="llama", tie=False, heads=4, kv_heads=1, hidden=128, inter=192, rope_scaling=True
    ),
    "llama_tied_plain": dict(
        family="llama", tie=True, heads=2, kv_heads=1, hidden=64, inter=96, head_dim=64
    ),
    **QWEN3_VARIANTS,
}


def hf_config(
    family="qwen2",
    *,
    tie=False,
    heads=2,
    kv_heads=1,
    hidden=128,
    inter=256,
    layers=2,
    vocab=211,
    head_dim=None,
    rope_scaling=False,
    max_pos=512,
):
    common = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_pos,
        tie_word_embeddings=tie,
        rms_norm_eps=1e-6,
        eos_token_id=1,
        bos_token_id=None,
        pad_token_id=0,
    )
    if head_dim is not None:
        common["head_dim"] = head_dim
    if family == "qwen2":
        return transformers.Qwen2Config(rope_theta=10_000.0, **common)
    if family == "qwen3":
        rope = dict(rope_type="default", rope_theta=1_000_000.0)
        return transformers.Qwen3Config(rope_parameters=rope, **common)
    rope = dict(rope_type="default", rope_theta=500_000.0)
    if rope_scaling:
        rope = dict(
            rope_type="llama3",
            rope_theta=500_000.0,
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=64,
        )
    return transformers.LlamaConfig(rope_parameters=rope, **common)


def write_hf_checkpoint(path: Path, *, seed: int = 0, max_shard_size=None, **kw) -> Path:
    """Writes a random-weight model (float32 safetensors) with transformers; returns `path`.

    Weights are drawn with std 0.2 (not the 0.02 init) and norms/biases are perturbed, so that
    every parameter measurably affects the logits and a wrong layout cannot go unnoticed.
    """
    torch.manual_seed(seed)
    config = hf_config(**kw)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    kwargs = {} if max_shard_size is None else {"max_shard_size": max_shard_size}
    model.save_pretrained(path, **kwargs)
    return Path(path)


def load_hf(path: Path):
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model.eval()


TOL = 1e-4  # max relative error against transformers, never loosened silently


def rel_err(ours, ref) -> float:
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(ours - ref).max() / np.abs(ref).max())
