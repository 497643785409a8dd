r"""tango_jax.tango.rewards: hand-worked rewards (TANGO_SPEC §2.1-2.2, §3.3, §4.3, §10), the time
limits, the OutcomeScorer pool, and step-end token positions with real HF tokenizers.

The tokenizers are built here with the `tokenizers` library: a byte-level BPE trained on a few
sentences so that `</step>` splits into several tokens (one of them merged with the following
newline) and multi-byte characters split into byte tokens, wrapped in PreTrainedTokenizerFast.
The reference for character offsets is the naive definition: decode every prefix of the ids and
count how much of the final text it has fixed.
"""

import signal
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from tango_jax.tango import formats as F
from tango_jax.tango import rewards as R

PATHOLOGICAL_MATH = "<answer>\\boxed{2^{2^{40}}}</answer>"  # sympy works on it for minutes

# ----------------------------------------------------------------------------------------------
# Outcome rewards.


@pytest.mark.parametrize(
    "response, gold, expected",
    [
        ("<answer>\\boxed{\\frac{1}{2}}</answer>", "0.5", 1.0),
        ("<answer>\\boxed{x^2+2x+1}</answer>", "(x+1)^2", 1.0),
        ("<answer>\\boxed{1,000}</answer>", "1000", 1.0),
        ("<think><step>\\boxed{1}</step></think><answer>\\boxed{2}</answer>", "2", 1.0),
        ("<think><step>\\boxed{1}</step></think><answer>\\boxed{2}</answer>", "1", 0.0),
        ("<answer>\\boxed{3}</answer>", "4", 0.0),
        ("no answer at all", "5", 0.0),
        ("\\boxed{5}", "", 0.0),  # unparsable gold: 0, counted as an error by the scorer
        ("", "5", 0.0),
    ],
)
def test_outcome_reward_by_hand(response, gold, expected):
    assert R.outcome_reward(response, gold) == expected


@pytest.mark.parametrize(
    "response, gold, expected",
    [
        ("so \\boxed{True}", "True", 1.0),
        ("\\boxed{False}", "True", 0.0),
        ("\\boxed{true}", "True", 0.0),  # words are not algebra: no sympy for them
        ("\\boxed{listen}", "silent", 0.0),
        ("\\boxed{\\dfrac{1}{2}}", "0.5", 1.0),  # dfrac -> frac, "0.5" -> \frac{1}{2}
        ("\\boxed{10\\%}", "10", 1.0),
        ("\\boxed{1,000}", "1000", 1.0),
        ("\\boxed{x = 3}", "3", 1.0),
        ("\\boxed{-3/4}", "\\frac{-3}{4}", 1.0),
        ("\\boxed{\\frac12}", "\\frac{1}{2}", 1.0),
        ("\\boxed{5 \\text{ cm}}", "5", 1.0),
        ("\\boxed{\\sqrt{4}}", "2", 1.0),  # sympy fallback
        ("\\boxed{0.50}", "\\frac{1}{2}", 1.0),  # sympy: equal values
        ("\\boxed{\\text{(B)}}", "(B)", 1.0),  # Minerva normalisation
        ("5", "5", 1.0),  # no box: the whole response is the answer
        ("The answer is 5", "5", 0.0),
        ("\\boxed{5} then \\boxed{6}", "\\boxed{6}", 1.0),
        ("\\box{5}", "5", 0.0),
    ],
)
def test_boxed_equal_reward_by_hand(response, gold, expected):
    assert R.boxed_equal_reward(response, gold) == expected


@pytest.mark.parametrize(
    "response, gold, expected",
    [
        ("\\boxed{[1, 2]}", "[1,2]", 1.0),
        ("\\boxed{'abc'}", "'abc'", 1.0),
        ('\\boxed{"abc"}', "'abc'", 1.0),
        ("\\boxed{abc}", "'abc'", 1.0),  # not a literal: compared as the raw string abc
        ("\\boxed{(1, 2)}", "[1, 2]", 0.0),
        ("\\boxed{{'a': 1}}", "{'a': 1}", 1.0),
        ("\\boxed{}", "''", 0.0),  # empty answer
        ("\\boxed{" + "9" * 10_000 + "}", "9" * 10_000, 1.0),  # over int's digit limit
        ("\\boxed{" + "[" * 10_000 + "}", "[", 0.0),  # too deep to parse
    ],
)
def test_cruxeval_reward_by_hand(response, gold, expected):
    assert R.cruxeval_reward(response, gold) == expected


def test_time_limit_scores_zero_and_restores_the_callers_timer():
    calls = []
    handler = lambda signum, frame: calls.append(signum)
    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, 100.0)
    try:
        start = time.monotonic()
        assert R.outcome_reward(PATHOLOGICAL_MATH, "1", timeout_s=0.3) == 0.0
        assert time.monotonic() - start < 3.0
        assert signal.getsignal(signal.SIGALRM) is handler
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 90.0 < left < 100.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert calls == []


def test_rewards_work_off_the_main_thread():
    """Math-Verify's own alarms raise off the main thread; ours are skipped there."""
    results = []
    thread = threading.Thread(
        target=lambda: results.append(R.outcome_reward("\\boxed{\\frac{2}{4}}", "1/2"))
    )
    thread.start()
    thread.join()
    assert results == [1.0]


def test_bad_timeout_is_an_error():
    with pytest.raises(ValueError, match="timeout_s"):
        R.outcome_reward("\\boxed{1}", "1", timeout_s=0)


@settings(max_examples=25, deadline=None)
@given(st.text(max_size=120), st.text(max_size=30))
def test_outcome_rewards_never_raise(response, gold):
    for fn in (R.outcome_reward, R.boxed_equal_reward, R.cruxeval_reward):
        assert fn(response, gold, timeout_s=2.0) in (0.0, 1.0)


# ----------------------------------------------------------------------------------------------
# Step and verifier rewards.


@pytest.mark.parametrize(
    "num_steps, judgments, expected",
    [
        (3, [1, -1, 1], [1 / 3, -1 / 3, 1 / 3]),
        (1, [-1], [-1.0]),
        (3, [1, 1], None),  # K mismatch: no step rewards at all
        (2, [1, 1, 1], None),
        (0, [], None),
    ],
)
def test_step_rewards_by_hand(num_steps, judgments, expected):
    assert R.step_rewards(num_steps, judgments) == expected


def test_step_rewards_reject_bad_input():
    with pytest.raises(ValueError, match="judgments"):
        R.step_rewards(2, [1, 0])
    with pytest.raises(ValueError, match="num_steps"):
        R.step_rewards(-1, [])


def test_step_rewards_from_a_parsed_verification():
    """TANGO_SPEC §10.3: a verification with one judgment fewer than K gives nothing."""
    response = F.render_generator_response(["a", "b", "c"], "9")
    k = len(F.split_steps(response))
    good = F.parse_verification(F.render_verification([1, 1, -1], F.INCORRECT))
    short = F.parse_verification(F.render_verification([1, 1], F.INCORRECT))
    assert R.step_rewards(k, good.step_judgments) == [1 / 3, 1 / 3, -1 / 3]
    assert R.step_rewards(k, short.step_judgments) is None


@pytest.mark.parametrize(
    "verdict, correct, fmt, expected",
    [
        (F.CORRECT, True, 1.0, 1.8),
        (F.INCORRECT, False, 1.0, 1.8),
        (F.INCORRECT, True, 1.0, 0.8),
        (F.CORRECT, False, 0.2, 0.16),
        (F.INCORRECT, False, 0.6, 1.48),
        (None, True, 1.0, 0.0),  # unparsable verdict: 0, the format does not count either
        (None, False, 0.0, 0.0),
    ],
)
def test_verifier_reward_by_hand(verdict, correct, fmt, expected):
    v = F.Verification((), verdict, 0)
    reward = R.verifier_reward(v, solution_correct=correct, format_score=fmt)
    assert reward == pytest.approx(expected, abs=1e-12)


def test_verifier_reward_end_to_end_and_bad_format_score():
    text = F.render_verification([1, -1], F.INCORRECT)
    v = F.parse_verification(text)
    fmt = F.verifier_format_score(text, expected_steps=2, generator_format_score=1.0)
    assert R.verifier_reward(v, solution_correct=False, format_score=fmt) == 1.8
    with pytest.raises(ValueError, match="format_score"):
        R.verifier_reward(v, solution_correct=False, format_score=1.5)


# ----------------------------------------------------------------------------------------------
# Step-end token positions.


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


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.sampled_from(["<step>", "</step>", "\n", "é", "日", "🙂", "ab", " 9"])
        | st.text(max_size=4),
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


# ----------------------------------------------------------------------------------------------
# The worker pool.


@pytest.fixture(scope="module")
def scorer():
    with R.OutcomeScorer(num_workers=2, timeout_s=2.0, grace_s=0.5) as pool:
        yield pool


CASES = [
    (R.RewardKind.MATH, "<answer>\\boxed{\\frac{1}{2}}</answer>", "0.5"),
    (R.RewardKind.MATH, "<answer>\\boxed{3}</answer>", "4"),
    (R.RewardKind.BOXED, "\\boxed{True}", "True"),
    (R.RewardKind.BOXED, "\\boxed{\\sqrt{4}}", "2"),
    (R.RewardKind.CRUXEVAL, "\\boxed{[1, 2]}", "[1,2]"),
    (R.RewardKind.CRUXEVAL, "\\boxed{(1, 2)}", "[1,2]"),
]
IN_PROCESS = {
    R.RewardKind.MATH: R.outcome_reward,
    R.RewardKind.BOXED: R.boxed_equal_reward,
    R.RewardKind.CRUXEVAL: R.cruxeval_reward,
}


def test_scorer_agrees_with_the_in_process_functions(scorer):
    for kind in R.RewardKind:
        pairs = [(r, g) for k, r, g in CASES if k is kind] * 5
        batch = scorer.score([r for r, _ in pairs], [g for _, g in pairs], kind)
        expected = [IN_PROCESS[kind](r, g) for r, g in pairs]
        assert batch.scores.dtype == np.float32 and batch.scores.tolist() == expected
        assert batch.timeouts == batch.errors == 0


def test_scorer_counts_soft_timeouts_and_errors(scorer):
    before = scorer.stats
    batch = scorer.score(
        [PATHOLOGICAL_MATH, "\\boxed{5}", "\\boxed{1}"], ["1", "", "1"], timeout_s=0.3
    )
    assert batch.scores.tolist() == [0.0, 0.0, 1.0]
    assert batch.timed_out.tolist() == [True, False, False]
    assert batch.errored.tolist() == [False, True, False]
    assert batch.metrics("generator/outcome") == {
        "generator/outcome/mean": pytest.approx(1 / 3),
        "generator/outcome/timeouts": 1.0,
        "generator/outcome/errors": 1.0,
        "generator/outcome/seconds": batch.seconds,
    }
    after = scorer.stats
    assert after.restarts == before.restarts  # the alarm stopped it: no worker was killed
    assert (after.items, after.timeouts, after.errors) == (
        before.items + 3,
        before.timeouts + 1,
        before.errors + 1,
    )


def test_scorer_kills_a_worker_stuck_in_c_code(scorer):
    """Parsing a 4M-element list literal is one C call (seconds) that the alarm cannot
    interrupt. Without a box the whole response is the answer: no other work comes first."""
    before = scorer.stats
    huge = "[" + "1," * 4_000_000 + "]"
    start = time.monotonic()
    batch = scorer.score([huge, "\\boxed{[1]}"], ["[1]", "[1]"], R.RewardKind.CRUXEVAL, 0.2)
    assert time.monotonic() - start < 5.0
    assert batch.scores.tolist() == [0.0, 1.0] and batch.timed_out.tolist() == [True, False]
    assert scorer.stats.restarts == before.restarts + 1
    again = scorer.score(["\\boxed{1}"] * 4, ["1"] * 4)  # the pool is whole again
    assert again.scores.tolist() == [1.0] * 4


def _kill(worker):
    worker.proc.kill()
    worker.proc.wait()


def test_scorer_replaces_workers_that_die_idle_or_starting(scorer):
    scorer.score(["\\boxed{1}"] * 8, ["1"] * 8)  # both workers ready
    before = scorer.stats
    _kill(scorer._workers[0])  # dies while idle
    scorer._replace(scorer._workers[1], kill=True)
    _kill(scorer._workers[1])  # its replacement dies while starting
    batch = scorer.score(["\\boxed{1}"] * 6, ["1"] * 6)
    assert batch.scores.tolist() == [1.0] * 6 and batch.errors == batch.timeouts == 0
    assert scorer.stats.restarts == before.restarts + 3


def test_scorer_recovers_from_an_interrupted_call(scorer, monkeypatch):
    """Results still in flight from an interrupted call must not leak into the next one."""
    scorer.score(["\\boxed{1}"] * 8, ["1"] * 8)  # both workers ready

    def interrupt():
        raise KeyboardInterrupt

    monkeypatch.setattr(scorer, "_collect", interrupt)
    with pytest.raises(KeyboardInterrupt):
        scorer.score(["\\boxed{7}"] * 2, ["7"] * 2)
    monkeypatch.undo()
    batch = scorer.score(["\\boxed{1}", "\\boxed{2}", "\\boxed{3}"], ["2", "3", "3"])
    assert batch.scores.tolist() == [0.0, 0.0, 1.0]  # a stale result would put 1.0 first


def test_scorer_argument_errors():
    with pytest.raises(ValueError, match="num_workers"):
        R.OutcomeScorer(num_workers=0)
    pool = R.OutcomeScorer(num_workers=1)
    with pytest.raises(ValueError, match="same length"):
        pool.score(["a"], [])
    pool.close()
    with pytest.raises(RuntimeError, match="after close"):
        pool.score([], [])
