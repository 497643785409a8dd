"""The shipped tiny tokenizer and the tiny checkpoints built with it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import transformers

from tango_jax.models import from_pretrained, presets
from tango_jax.models.tiny import write_tiny_checkpoint
from tango_jax.models.tokenizer import (
    TINY_TOKENIZER_DIR,
    _tokenizer_class,
    load_tokenizer,
    tiny_tokenizer,
)


def test_tiny_tokenizer_fits_the_tiny_presets():
    tok = tiny_tokenizer()
    assert len(tok) <= presets.TINY_VOCAB_SIZE
    assert (tok.pad_token_id, tok.eos_token_id) == (0, 1)
    for name in ("tiny-qwen2", "tiny-llama"):
        assert presets.get(name).eos_token_id == tok.eos_token_id
        assert presets.get(name).pad_token_id == tok.pad_token_id


@pytest.mark.parametrize(
    "text", ["<step>12 + 345 = 357</step>", "unicode: é ∑ 漢字 🙂", "\\boxed{CORRECT}\n\n  x"]
)
def test_round_trip_any_text(text):
    tok = tiny_tokenizer()
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text


def test_digits_are_single_tokens():
    tok = tiny_tokenizer()
    pieces = tok.convert_ids_to_tokens(tok("x 90817", add_special_tokens=False)["input_ids"])
    assert [p for p in pieces if p.strip("Ġ").isdigit()] == list("90817")


def test_tiny_checkpoint_is_an_ordinary_hf_checkpoint(tmp_path):
    path = write_tiny_checkpoint(tmp_path / "tiny", "tiny-qwen2", seed=3)
    auto = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    assert auto.eos_token_id == 1
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(path))
    assert hf.config.head_dim == 64
    assert from_pretrained(path).config == presets.get("tiny-qwen2")


def test_missing_tokenizer_names_the_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        load_tokenizer(tmp_path)
    assert TINY_TOKENIZER_DIR.exists()


@pytest.mark.parametrize("which", ["tiny", "smollm2"])
def test_the_tokenizers_backend_loads_as_autotokenizer_would(which, request, tmp_path):
    """tokenizer_config.json naming the plain `tokenizers` backend (the tiny tokenizer's, and
    SmolLM2's as converted): load_tokenizer's tokenizer is AutoTokenizer's, class, ids, special
    tokens and chat template; another class name goes through AutoTokenizer."""
    path = TINY_TOKENIZER_DIR if which == "tiny" else request.getfixturevalue("smollm2_dir")
    ours = load_tokenizer(path)
    auto = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    assert type(ours) is type(auto) and len(ours) == len(auto)
    text = "<step>12 + 345 = 357</step> \\boxed{CORRECT} é 漢字"
    assert ours(text)["input_ids"] == auto(text)["input_ids"]
    assert ours.special_tokens_map == auto.special_tokens_map
    assert ours.chat_template == auto.chat_template
    other = tmp_path / "other"
    other.mkdir()
    (other / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "GPT2Tokenizer"}))
    assert _tokenizer_class(other) is transformers.AutoTokenizer


def test_the_tiny_tokenizer_loads_without_pytorch():
    """A tiny run's child process needs no PyTorch to tokenize (~5 s of imports less)."""
    code = "import sys; from tango_jax.models import tokenizer; tokenizer.tiny_tokenizer(); "
    code += "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.split("\n")[-2:] == ["['transformers']", ""], done.stderr[-2000:]
