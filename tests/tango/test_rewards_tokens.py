r"""tango_jax.tango.rewards: step-end token positions with real HF tokenizers (TANGO_SPEC §10).

The tokenizers are built here with the `tokenizers` library: a byte-level BPE trained on a few
sentences so that `</step>` splits into several tokens (one of them merged with the following
newline) and multi-byte characters split into byte tokens, wrapped in PreTrainedTokenizerFast.
The reference for character offsets is the naive definition: decode every prefix of the ids and
count how much of the final text it has fixed.
"""

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from tango_jax.tango import rewards as R
from tango_jax.text import formats as F


def _train(pre_tokenizer, decoder, alphabet):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer, tok.decoder = pre_tokenizer, decoder
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        initial_alphabet=alphabet,
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    corpus = [
        "First compute three times two, then subtract six from fifteen.",
        "ep>\nep>\nep>\n step steps stepped",  # makes a '>\n' token but no '</step>' token
    ]
    tok.train_from_iterator(corpus * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


@pytest.fixture(scope="module")
def byte_level():
    tokenizer = _train(
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        decoders.ByteLevel(),
        pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.add_tokens(["<think>"])  # an added, non-special token
    return tokenizer


@pytest.fixture(scope="module")
def metaspace():
    """SentencePiece-style: not byte-level, so token_char_ends takes its generic path."""
    return _train(pre_tokenizers.Metaspace(), decoders.Metaspace(), [])


def reference_char_ends(tokenizer, ids):
    """How many leading characters of the final text each prefix of the ids has fixed."""
    text = tokenizer.decode(ids, skip_special_tokens=True)
    ends = []
    for i in range(len(ids)):
        prefix = tokenizer.decode(ids[: i + 1], skip_special_tokens=True)
        n = 0
        while n < min(len(prefix), len(text)) and prefix[n] == text[n]:
            n += 1
        ends.append(n)
    return ends


RESPONSE = (
    "<think>\n<step>Compute 3 * 2 = 6.</step>\n<step>Then 15 - 6 = 9.</step>\n</think>\n"
    "<answer>\\boxed{9}</answer>"
)
UNICODE_RESPONSE = "<think><step>café 日本 🙂</step>\n<step>é</step><step>∑ x²</step></think>"


def test_hand_worked_single_byte_tokens(byte_level):
    """Every character its own token ('Ċ' is byte-level for '\\n'; 'Ã' '©' are the two bytes
    of 'é'): char ends are 1..15, then 15 and 16. The step ends at character 14, so its reward
    lands on token 13, the '>' of '</step>'; the official code would pick token 14, the newline.
    """
    tokens = [*"<step>a</step>", "Ċ", "Ã", "©"]
    ids = byte_level.convert_tokens_to_ids(tokens)
    assert byte_level.decode(ids) == "<step>a</step>\né"
    ends = R.token_char_ends(byte_level, ids)
    assert ends == [*range(1, 16), 15, 16]
    steps = F.split_steps("<step>a</step>\né")
    assert steps[0].end == 14
    assert R.step_end_token_indices(steps, ends) == [13]


@pytest.mark.parametrize("text", [RESPONSE, UNICODE_RESPONSE])
def test_char_ends_match_prefix_decoding(byte_level, text):
    ids = byte_level.encode(text, add_special_tokens=False)
    ref = reference_char_ends(byte_level, ids)
    pieces = R._byte_level_pieces(byte_level, ids)
    assert R._char_ends_from_bytes(pieces) == (ref, text)  # the O(T) byte-level path
    assert R.token_char_ends(byte_level, ids) == ref
    # The generic path must agree as well (multi-byte characters wait for their last token).
    assert R._windowed_char_ends(byte_level, ids, text) == ref


def test_special_tokens_add_no_characters(byte_level):
    eos = byte_level.eos_token_id
    ids = byte_level.encode("<step>a</step>", add_special_tokens=False)
    ids = [eos, *ids[:3], eos, *ids[3:], eos]
    fast_text = R._char_ends_from_bytes(R._byte_level_pieces(byte_level, ids))[1]
    assert fast_text == byte_level.decode(ids, skip_special_tokens=True)  # the O(T) path
    ends = R.token_char_ends(byte_level, ids)
    assert ends[0] == 0 and ends[4] == ends[3] and ends[-1] == ends[-2] == len("<step>a</step>")
    assert ends == reference_char_ends(byte_level, ids)


@pytest.mark.parametrize("text", [RESPONSE, UNICODE_RESPONSE])
def test_step_reward_lands_on_the_token_that_completes_the_closing_tag(byte_level, text):
    ids = byte_level.encode(text, add_special_tokens=False)
    ref = reference_char_ends(byte_level, ids)
    steps = F.split_steps(byte_level.decode(ids))
    indices = R.step_end_token_indices(steps, R.token_char_ends(byte_level, ids))
    assert len(indices) == len(steps) == 3 if text is UNICODE_RESPONSE else 2
    for step, i in zip(steps, indices):
        assert ref[i] >= step.end and (i == 0 or ref[i - 1] < step.end)
        # The precondition of this test: '</step>' spans several tokens.
        assert sum(step.end - 7 < e <= step.end for e in ref) >= 2


def test_closing_tag_merged_with_the_next_newline(byte_level):
    """'>' and the newline after '</step>' share a token: that token completes the tag."""
    ids = byte_level.encode("<step>a</step>\nb", add_special_tokens=False)
    tokens = byte_level.convert_ids_to_tokens(ids)
    assert ">Ċ" in tokens
    [index] = R.step_end_token_indices(
        F.split_steps("<step>a</step>\nb"), R.token_char_ends(byte_level, ids)
    )
    assert tokens[index] == ">Ċ"


def test_a_literal_replacement_character_ends_at_its_last_byte(byte_level):
    """U+FFFD is three UTF-8 bytes, one byte-level token each: the character is complete only
    at the third (prefix decoding says 1 from the first on: the case the property test below
    must leave out). Found by that test in CI, 2026-11-25."""
    ids = byte_level.encode("\ufffd", add_special_tokens=False)
    assert len(ids) == 3
    assert R.token_char_ends(byte_level, ids) == [0, 0, 1]


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.sampled_from(["<step>", "</step>", "\n", "é", "日", "🙂", "ab", " 9"])
        # without U+FFFD: the reference (prefix decoding) cannot tell a literal replacement
        # character from the partial bytes of one, so it, not token_char_ends, is wrong there
        | st.text(st.characters(exclude_characters="\ufffd"), max_size=4),
        max_size=20,
    ).map("".join)
)
def test_char_ends_match_prefix_decoding_on_random_text(byte_level, text):
    ids = byte_level.encode(text, add_special_tokens=False)
    ends = R.token_char_ends(byte_level, ids)
    assert ends == reference_char_ends(byte_level, ids)
    steps = F.split_steps(byte_level.decode(ids))
    for step, i in zip(steps, R.step_end_token_indices(steps, ends)):
        assert ends[i] >= step.end and (i == 0 or ends[i - 1] < step.end)


def test_generic_path_for_a_sentencepiece_style_tokenizer(metaspace):
    ids = metaspace.encode("<step>First compute six</step> then <step>two</step>")
    fast_text = R._char_ends_from_bytes(R._byte_level_pieces(metaspace, ids))[1]
    assert fast_text != metaspace.decode(ids)  # so the windowed path is the one under test
    assert R.token_char_ends(metaspace, ids) == reference_char_ends(metaspace, ids)


def test_char_ends_of_4096_tokens_take_well_under_100_ms(byte_level):
    ids = byte_level.encode(UNICODE_RESPONSE + RESPONSE, add_special_tokens=False)
    ids = (ids * (4096 // len(ids) + 1))[:4096]
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        ends = R.token_char_ends(byte_level, ids)
        best = min(best, time.perf_counter() - start)
    assert len(ends) == 4096 and ends[-1] == len(byte_level.decode(ids))
    assert best < 0.1


def test_step_end_indices_edge_cases():
    steps = [F.Step("a", 0, 14), F.Step("b", 20, 100)]
    assert R.step_end_token_indices(steps, [5, 14, 14, 30]) == [1, 3]  # 100 > 30: clamped
    assert R.step_end_token_indices([], []) == []
    with pytest.raises(ValueError, match="no tokens"):
        R.step_end_token_indices(steps, [])
