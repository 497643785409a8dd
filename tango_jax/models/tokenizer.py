"""Tokenizers: loading from local checkpoint directories, and the project's tiny tokenizer.

Every tokenizer loads from a local directory as `transformers.AutoTokenizer` loads it (offline), so
the tiny models are ordinary HF checkpoints that vLLM serves like any other.

The tiny tokenizer is a byte-level BPE (the scheme of Qwen2 and Llama 3: any UTF-8 text is
encodable, nothing is ever unknown) with digits split one per token (as Qwen2 does, which
makes arithmetic learnable for a small model) and a 512-entry vocabulary. It is trained by
`scripts/assets/build_tiny_tokenizer.py` on text of the tiny task and the Tango prompt formats, and
shipped in `tango_jax/assets/tiny_tokenizer/` so runs never depend on training it again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

TINY_TOKENIZER_DIR = Path(__file__).resolve().parent.parent / "assets" / "tiny_tokenizer"
PAD_TOKEN = "<|pad|>"  # id 0
EOS_TOKEN = "<|endoftext|>"  # id 1


def load_tokenizer(path: str | os.PathLike):
    """The tokenizer `transformers.AutoTokenizer` loads from a local directory, never from the
    network (`_tokenizer_class`)."""
    path = Path(path)
    if not (path / "tokenizer.json").exists() and not (path / "tokenizer_config.json").exists():
        raise FileNotFoundError(
            f"{path}: no tokenizer.json or tokenizer_config.json. Point the model path at a "
            "Hugging Face checkpoint directory that includes its tokenizer files (for the tiny "
            f"models, copy them from {TINY_TOKENIZER_DIR})."
        )
    tokenizer = _tokenizer_class(path).from_pretrained(str(path), local_files_only=True)
    if tokenizer.pad_token_id is None:  # Llama 3 ships without a pad token
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


# What tokenizer_config.json calls the plain `tokenizers` backend (transformers 5, and 4).
_FAST_BACKEND = ("TokenizersBackend", "PreTrainedTokenizerFast")


def _tokenizer_class(path: Path):
    """`AutoTokenizer`, or the class it resolves to when tokenizer_config.json names the plain
    `tokenizers` backend (the tiny tokenizer's): importing that class alone leaves PyTorch
    unimported, ~5 s less in every process that needs no more of transformers (the tiny
    runs' child processes)."""
    config = path / "tokenizer_config.json"
    if config.exists() and json.loads(config.read_text()).get("tokenizer_class") in _FAST_BACKEND:
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast
    from transformers import AutoTokenizer

    return AutoTokenizer


def train_tiny_tokenizer(corpus: Iterable[str], vocab_size: int = 512):
    """Trains the byte-level BPE on `corpus`; returns a `PreTrainedTokenizerFast`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD_TOKEN, EOS_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        clean_up_tokenization_spaces=False,
        model_max_length=2048,
    )


def tiny_tokenizer():
    """The shipped tiny tokenizer."""
    return load_tokenizer(TINY_TOKENIZER_DIR)
