"""step_probe's loading: a tokenizer that splits the judgment words is refused before the
model is read, and the tiny model runs on one PyTorch thread, the caller's count given back."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tango_jax.eval import step_probe  # noqa: E402


def test_a_tokenizer_that_splits_the_judgment_words_is_refused_before_the_model_loads(tmp_path):
    """A word-level tokenizer without CORRECT / INCORRECT, in a directory with no model at all:
    the refusal names the checkpoint, so nothing (a large verifier, twice in float32) was read
    only to be refused."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "{": 1, "}": 2}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>").save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=f"{tmp_path}: this probe needs single tokens"):
        step_probe.load(str(tmp_path))


def test_one_torch_thread_inside_and_the_callers_count_restored_even_on_error():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with step_probe._one_torch_thread():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), step_probe._one_torch_thread():
            raise RuntimeError("a failing probe")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
